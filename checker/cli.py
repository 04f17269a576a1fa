"""`checker`: grade a lab by running the learner's code and measuring it.

    checker list
    checker grade lab1                  # your code in labs/
    checker grade lab1 --solutions      # the reference (CI, instructors)
    checker grade --all --solutions --json report.json
    checker doctor                      # environment diagnostics: run it first on a new node
    checker hint lab2 [TASK]            # the tasks of a lab; the next hint tier of one (checker/hints.py)

Exit status: 0 every check passed, 1 a check failed, 2 bad usage or input (unknown lab, missing
folder, learner code that does not import), always with one clear line saying which; 3 no check failed
but some could not run on this machine (NOT RUN: no Slurm, no root, no GPU), so there is no grade.
With --all (`make demo`, a machine's smoke test) NOT RUN checks are listed and the exit is 0 when every
check that ran passed and at least one ran.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from checker import hints, labs, launch, placement, sandbox, seams, versions
from checker.harness import REPO_ROOT, Harness
from checker.labs._common import cannot_run
from checker.report import LabReport, closing_line, render, render_not_run, write_json

DEVICE_CHOICES = ("auto", "cpu", "cuda")  # mirrors labs.common.dist.DEVICE_CHOICES without importing torch
PRECISIONS = ("fp32", "bf16")  # mirrors labs.common.precision.PRECISIONS
# bf16 grading: lab 1 only. Its checks compare a run with itself (bit-identical under bf16 autocast too) or
# with the reference in the same precision; the other labs compare with fp32 tolerances (1e-5) that bf16's
# 8-bit mantissa (relative error ~4e-3) could never meet.
BF16_LABS = ("lab1",)


EXIT_NOT_RUN = 3


class UsageError(Exception):
    """Bad usage or input: exit status 2 with this one line."""


def _lab_module(lab: str):
    return labs.parent(lab)


def cmd_list(console: Console) -> int:
    for lab in seams.lab_names():
        s = seams.SEAMS[lab]
        world = getattr(_lab_module(lab), "WORLD_SIZE", 1)
        console.print(f"[bold]{lab}[/] {s.title}  (labs/{s.folder}; {world} rank{'s' * (world > 1)})")
        for c in _lab_module(lab).CHECKS:
            console.print(f"  {c.name:<18} {c.what}")
    return 0


def _check_json_path(path: str | None) -> None:
    """Open the file for writing, as the report will (os.access says yes to root for /proc/x)."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"cannot write the --json report to {path}: it is a folder")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise UsageError(f"cannot write the --json report to {path}: {e.strerror or e}") from None
    if not existed:
        p.unlink(missing_ok=True)


def _grade_runnable(mod, h, checks):
    """The lab grades the checks this machine can run; the others are NOT RUN (each says why and how),
    set aside here, before the lab starts a run for them."""
    skipped = cannot_run(checks, h.device)
    runnable = [c for c in checks if c.name not in skipped]
    results, info = mod.grade(h, runnable) if runnable else ([], [])
    byname = {r.name: r for r in results} | skipped
    return [byname[c.name] for c in checks], info


def _sandbox_line(args) -> str:
    """How this grade's runs are isolated, one line printed with every report."""
    if args.no_sandbox:
        return "not sandboxed (--no-sandbox): learner code could reach the checker, the course files and the network"
    why = sandbox.why_not()
    return f"not sandboxed: {why}" if why else "sandboxed: the grade's runs in a bwrap (read-only course, loopback)"


def grade_lab(lab: str, args, console: Console) -> LabReport:
    mod = _lab_module(lab)
    checks = mod.CHECKS
    world = getattr(mod, "WORLD_SIZE", 1)
    if args.nproc is not None and args.nproc != world:  # say so rather than grade something else silently
        raise UsageError(f"{lab} grades at world size {world}; --nproc {args.nproc} is not supported for it")
    if args.only:
        checks = [c for c in checks if c.name in args.only]
        unknown = set(args.only) - {c.name for c in mod.CHECKS}
        if unknown:
            raise UsageError(f"{lab} has no check {', '.join(sorted(unknown))}; its checks: "
                             f"{', '.join(c.name for c in mod.CHECKS)}")
    root = Path(args.root).resolve()
    target = "solutions" if args.solutions else "labs"
    folder = root / target / seams.SEAMS[lab].folder
    if not (folder / "__init__.py").exists():
        raise UsageError(f"{folder} not found: run from the course repository, or pass --root")
    workdir = Path(tempfile.mkdtemp(prefix=f"checker-{lab}-"))
    t0 = time.monotonic()
    h = None
    sandboxed = not args.no_sandbox and sandbox.why_not() is None
    before = sandbox.course_digest()
    try:
        # A live spinner on a terminal; elsewhere (CI logs, notebooks) one line per finished run.
        live = sys.stdout.isatty()
        with (console.status(f"{lab}: starting") if live else contextlib.nullcontext()) as status:
            h = Harness(workdir, lab, target, args.device, root=root, variant=args.variant,
                        on_progress=(lambda m: status.update(f"{lab}: running {m}")) if live else None,
                        on_finish=None if live else (lambda run: console.print(
                            f"[dim]{lab}: {run.name} finished in {run.seconds:.1f} s[/]")), sandboxed=sandboxed)
            probe = h.run("probe", "probe", {}, budget_s=60)
            err = probe.error()
            if err and err["type"] == "ReferenceImportError":  # the message is the whole story: say it alone
                raise UsageError(f"{err['message'].splitlines()[0]} ({err.get('where') or target})")
            if err:
                where = f" ({err['where']})" if err.get("where") else ""
                raise UsageError(f"{target}/{seams.SEAMS[lab].folder} does not import: "
                                 f"{err['type']}: {err['message'].splitlines()[0] if err['message'] else ''}{where}")
            results, info = _grade_runnable(mod, h, checks)
            versions.annotate(results, probe.result.get("torch", ""), versions.torch_requirement(root))
            info = list(info) + _device_info(h, args)
        changed = sandbox.changed_files(before, sandbox.course_digest())
        if changed:  # the grader or the reference was rewritten while learner code ran: nothing it measured counts
            for r in results:
                r.passed, r.message = False, (
                    f"the course's own files changed during this grade ({', '.join(changed[:3])}): learner code "
                    "must not write to checker/, solutions/ or the shared labs/ packages; restore them (git checkout), "
                    "grade again")
    finally:
        if h is not None:
            h.close()
        if args.keep:
            console.print(f"[dim]run folder kept: {workdir}[/]")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report = LabReport(lab, target, probe.result.get("device", args.device), world, time.monotonic() - t0, results,
                       info, total_checks=len(mod.CHECKS), variant=args.variant)
    report.sandbox = _sandbox_line(args)
    if hasattr(mod, "ranks_needed"):  # runs of several sizes: the header says which, not one world size
        sizes = [mod.ranks_needed(c.name, args.variant) for c in checks]
        report.ranks = f"{min(sizes)}-{max(sizes)} ranks per run" if min(sizes) != max(sizes) else \
            f"world size {sizes[0]}"
    return report


def _device_info(h: Harness, args) -> list[tuple[str, str]]:
    """What the report says about how its CUDA runs were made comparable (nothing on CPU)."""
    if h.gpus is None:
        return []
    return [("GPUs", f"{len(h.gpus.gpus)} visible ({','.join(h.gpus.gpus)}); each run on its own "
                     f"(CUDA_VISIBLE_DEVICES), {h.gpus.per_gpu} rank(s) per GPU"),
            ("determinism", "graded CUDA runs: torch.use_deterministic_algorithms(True, warn_only=True), "
                            "CUBLAS_WORKSPACE_CONFIG=:4096:8, attention by the math SDPA kernel"),
            ("precision", f"{args.precision} (MFU against the {args.precision} peak)")]


def _check_device(args) -> None:
    """Refuse at once what no run could do here (exit 2), instead of a failed probe with a torch traceback."""
    if args.device == "cuda" and not placement.visible_gpus():
        raise UsageError("--device cuda: no GPU is visible (no NVIDIA driver, or CUDA_VISIBLE_DEVICES is empty); "
                         "grade on CPU with --device cpu, or run this on a GPU node")
    if args.precision != "fp32":
        labs = [seams.normalise(args.lab)] if args.lab else seams.lab_names()
        if args.all or any(lab not in BF16_LABS for lab in labs):
            raise UsageError(f"--precision {args.precision} grades {', '.join(BF16_LABS)} only: the other labs compare "
                             "with fp32 tolerances; measure them in bf16 with their train.py --precision bf16")
    os.environ["COURSE_PRECISION"] = args.precision  # every run of this grade (labs.common.precision reads it)


def cmd_grade(args, console: Console) -> int:
    if args.all == bool(args.lab):
        raise UsageError("give one lab (e.g. `checker grade lab1`) or --all")
    _check_device(args)
    if args.no_hints and not args.submissions:
        raise UsageError("--no-hints goes with --submissions (a class's grade); a learner just does not ask")
    if args.learner_budget is not None and not args.submissions:
        raise UsageError("--learner-budget goes with --submissions: it caps each learner's grade in a class's batch")
    slurm_only = [o for o, given in (("--partition", args.partition), ("--gpus-per-learner", args.gpus_per_learner),
                                     ("--learners-per-task", args.learners_per_task),
                                     ("--rerun-missing", args.rerun_missing or None)) if given is not None]
    if slurm_only and not args.slurm:
        raise UsageError(f"{', '.join(slurm_only)} go(es) with --slurm (a class's grade as a Slurm job array)")
    if args.slurm and not args.submissions:
        raise UsageError("--slurm grades a class: `checker grade lab1 --submissions DIR --slurm`")
    if args.submissions:
        return cmd_batch(args, console)
    if args.all:
        labs = [lab for lab in seams.lab_names()
                if (Path(args.root) / ("solutions" if args.solutions else "labs") / seams.SEAMS[lab].folder).exists()]
    else:
        lab = seams.normalise(args.lab)
        if lab is None:
            raise UsageError(f"unknown lab {args.lab!r}; labs are: {', '.join(seams.lab_names())}")
        labs = [lab]
    _check_json_path(args.json)
    reports = []
    for lab in labs:
        try:
            report = grade_lab(lab, args, console)
        except (placement.Oversubscribed, launch.ServerGone) as e:
            raise UsageError(str(e)) from None
        render(report, console, verbose=args.verbose)
        reports.append(report)
    if args.json:
        write_json(reports, args.json, every_lab=args.all)
    status = exit_status(reports, every_lab=args.all)
    if args.all:  # `make demo`: the list of what could not run, then one closing line, the last on the screen
        render_not_run(reports, console)
        colour = "red" if status == 1 else "green" if status == 0 else "yellow"
        console.print(f"[bold {colour}]{escape(closing_line(reports))}[/]")
    return status


def exit_status(reports: list[LabReport], every_lab: bool) -> int:
    """1 a check that ran failed; 0 every check ran and passed; checks NOT RUN here: 3 (no grade), except
    for --all, a machine's smoke test, where they are listed and it is 0 once one check ran and passed."""
    if any(r.failed for r in reports) or not reports:
        return 1
    if not any(r.not_run for r in reports):
        return 0
    ran = any(len(r.checks) > len(r.not_run) for r in reports)
    return 0 if every_lab and ran else EXIT_NOT_RUN


def cmd_batch(args, console: Console) -> int:
    from checker import batch

    lab = seams.normalise(args.lab or "")
    if lab is None or args.all:
        raise UsageError("--submissions grades one lab: `checker grade lab1 --submissions DIR`")
    subs = Path(args.submissions)
    if not subs.is_dir():
        raise UsageError(f"--submissions {subs}: not a folder")
    if args.slurm:
        return _batch_on_slurm(args, lab, subs, console)
    if not args.no_sandbox and sandbox.why_not():
        raise UsageError(f"--submissions grades each learner in a sandbox, and {sandbox.why_not()}. Install it "
                         f"(`{sandbox.INSTALL}`), or pass --no-sandbox to grade without one (every report says so)")
    world = getattr(_lab_module(lab), "WORLD_SIZE", 1)
    gpus = placement.visible_gpus() if placement.uses_gpu(args.device) else []
    if gpus:  # one block of GPUs per learner graded at once (checker/batch.py); cores don't limit a GPU grade
        parallel = args.parallel or max(1, len(gpus) // placement.gpus_needed(world, placement.ranks_per_gpu()))
    else:
        parallel = args.parallel or max(1, (os.cpu_count() or 1) // world)
    if args.learner_budget is not None and args.learner_budget <= 0:
        raise UsageError(f"--learner-budget must be positive seconds, got {args.learner_budget}")
    variant = args.variant if args.variant else int.from_bytes(os.urandom(2), "big") % 1000 + 1
    report_dir = Path(args.report_dir or f"class-report-{lab}")
    console.print(_sandbox_line(args))
    try:
        ok = batch.grade_all(lab, subs, parallel, variant, report_dir, console, args.only, no_sandbox=args.no_sandbox,
                             gpu_blocks=batch.gpu_blocks(gpus, parallel, world) if gpus else None, device=args.device,
                             no_hints=args.no_hints, verbose=args.verbose, budget=args.learner_budget)
    except (ValueError, placement.Oversubscribed) as e:
        raise UsageError(str(e)) from None
    return 0 if ok else 1


def _batch_on_slurm(args, lab: str, subs: Path, console: Console) -> int:
    """`--submissions DIR --slurm`: the class as a job array (checker/batch_slurm.py). Slurm gives each learner's
    task the lab's ranks in CPUs and --gpus-per-learner GPUs, and runs as many tasks at once as its nodes hold
    (--parallel N: at most N). The sandbox is checked on each compute node, where learner code runs."""
    from checker import batch_slurm, slurm

    why = slurm.unavailable()
    if why:
        raise UsageError(f"--slurm: {why}; {slurm.HINT_START}")
    world = getattr(_lab_module(lab), "WORLD_SIZE", 1)
    gpus = args.gpus_per_learner or 0
    if gpus < 0 or (args.learners_per_task is not None and args.learners_per_task < 1):
        raise UsageError("--gpus-per-learner is 0 or more, --learners-per-task 1 or more")
    need = placement.gpus_needed(world, placement.ranks_per_gpu())
    if args.device == "cuda" and gpus < need:
        raise UsageError(f"--device cuda on Slurm: each learner's task needs its own GPUs, {need} for {lab}'s "
                         f"{world}-rank runs: --gpus-per-learner {need}")
    if gpus and args.device == "cpu":
        raise UsageError("--gpus-per-learner with --device cpu: the GPUs would be allocated and never used")
    if 0 < gpus < need:
        raise UsageError(f"--gpus-per-learner {gpus}: {lab}'s {world}-rank runs need {need}")
    if args.parallel is not None and args.parallel < 1:
        raise UsageError(f"--parallel must be 1 or more, got {args.parallel}")
    if args.learner_budget is not None and args.learner_budget <= 0:
        raise UsageError(f"--learner-budget must be positive seconds, got {args.learner_budget}")
    variant = args.variant or (0 if args.rerun_missing else int.from_bytes(os.urandom(2), "big") % 1000 + 1)
    console.print(_sandbox_line(args) if args.no_sandbox else "sandboxed on each compute node: the grade's runs in "
                  "a bwrap (read-only course, loopback); a node without bubblewrap fails its learners' rows, saying so")
    try:
        ok = batch_slurm.grade_all(lab, subs, variant, Path(args.report_dir or f"class-report-{lab}"), console,
                                   args.only, no_sandbox=args.no_sandbox, device=args.device, no_hints=args.no_hints,
                                   verbose=args.verbose, budget=args.learner_budget, partition=args.partition,
                                   gpus_per_learner=gpus, cpus_per_learner=world, per_task=args.learners_per_task,
                                   throttle=args.parallel, rerun_missing=args.rerun_missing)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0 if ok else 1


def cmd_hint(args, console: Console) -> int:
    """`checker hint LAB`: the lab's tasks and the tiers opened; `checker hint LAB TASK`: open the next tier."""
    lab = seams.normalise(args.lab)
    if lab is None:
        raise UsageError(f"unknown lab {args.lab!r}; labs are: {', '.join(seams.lab_names())}")
    root = Path(args.root).resolve()
    why = hints.off(root)
    if why:
        raise UsageError(f"no hints: {why}")
    try:
        if args.task is None:
            done = hints.opened(hints.folder(root, lab))
            console.print(f"[bold]{lab}[/]: `checker hint {lab} TASK` opens the next tier of a task "
                          f"(1: {hints.TIER_NAMES[1]}, 2: {hints.TIER_NAMES[2]}, 3: {hints.TIER_NAMES[3]})")
            for t in hints.tasks(root, lab):
                tier = done.get(t["name"], {}).get("tier", 0)
                console.print(f"  [bold]{t['name']}[/] (labs/{t['file']}:{t['line']}; "
                              f"{tier}/{len(t['tiers'])} opened)\n    {escape(t['contract'])}")
            return 0
        task, tier = hints.reveal(root, lab, args.task)
    except (LookupError, FileNotFoundError) as e:
        raise UsageError(str(e).strip("'\"")) from None
    console.print(f"[bold]{task['name']}[/] (labs/{task['file']}:{task['line']})\n  must hold: "
                  f"{escape(task['contract'])}")
    for k, text in enumerate(task["tiers"][:tier], 1):
        console.print(f"  [bold]hint {k}[/] ({hints.TIER_NAMES.get(k, 'more')}): {escape(text)}")
    left = len(task["tiers"]) - tier
    console.print(f"  [dim]{left} more tier{'s' * (left != 1)}: run the same command again[/]" if left else
                  "  [dim]that was the last tier[/]")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="checker", description="Grade the course's labs by running them.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="labs and the checks of each")
    d = sub.add_parser("doctor", help="environment diagnostics: run it first on a new node (exit 1 if a row fails)")
    d.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    d.add_argument("--device", choices=DEVICE_CHOICES, default="auto",
                   help="the path to diagnose (auto: as the labs pick)")
    d.add_argument("--timeout", type=float, default=60.0, metavar="S", help="budget of the 2-rank all-reduce test")
    h = sub.add_parser("hint", help="a lab's tasks, or the next hint tier of one (1 concept, 2 shape, 3 recipe)")
    h.add_argument("lab", help=f"{seams.lab_names()[0]} ... {seams.lab_names()[-1]}")
    h.add_argument("task", nargs="?", help="a task's name, or a unique end of it (`checker hint LAB` lists them)")
    h.add_argument("--root", default=str(REPO_ROOT), help="folder holding labs/ (your tree)")
    g = sub.add_parser("grade", help="run a lab's checks")
    g.add_argument("lab", nargs="?", help=f"{seams.lab_names()[0]} ... {seams.lab_names()[-1]} "
                                          f"(or {seams.lab_names()[0][3:]} ... {seams.lab_names()[-1][3:]})")
    g.add_argument("--all", action="store_true", help="every lab that exists")
    g.add_argument("--solutions", action="store_true", help="grade solutions/ instead of labs/")
    g.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    g.add_argument("--nproc", type=int, default=None,
                   help="ranks; must be the lab's world size (`checker list` says each lab's)")
    g.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    g.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="bf16: train under bf16 autocast with fp32 master weights (lab1; MFU against the bf16 peak)")
    g.add_argument("--only", action="append", metavar="CHECK", help="run only this check (repeatable)")
    g.add_argument("--root", default=str(REPO_ROOT), help="folder holding labs/ and solutions/")
    g.add_argument("--keep", action="store_true", help="keep the run folder (logs, checkpoints)")
    g.add_argument("-v", "--verbose", action="store_true", help="show stacks and tracebacks of failures (with "
                   "--submissions: each failure's message, hint and the learner's own frames of a hang)")
    g.add_argument("--variant", type=int, default=0,
                   help="instructors: a hidden variant (other seeds, data order, kill steps, world sizes); 0 = public")
    g.add_argument("--submissions", metavar="DIR",
                   help="instructors: grade every learner folder in DIR (copies of labs/)")
    g.add_argument("--parallel", type=int, default=None, help="with --submissions: learners graded at once "
                                                               "(default: cores / ranks per grade; with --slurm: "
                                                               "at most N tasks at once, default what Slurm fits)")
    g.add_argument("--report-dir", metavar="DIR", help="with --submissions: where class.csv/.junit.xml go")
    g.add_argument("--learner-budget", type=float, default=None, metavar="S",
                   help="with --submissions: seconds one learner's whole grade may take; past it every check of "
                        "theirs fails as hung (default 600 x CHECKER_BUDGET_SCALE)")
    g.add_argument("--no-hints", action="store_true", help="with --submissions: a class graded without hints (hand "
                   "out labs/.hints-off): each learner's opened tiers are flagged in the report")
    g.add_argument("--slurm", action="store_true", help="with --submissions: grade the class as a Slurm job array, "
                   "a task per few learners on the compute nodes, collected into the same class report")
    g.add_argument("--partition", metavar="P", help="with --slurm: the partition the tasks go to")
    g.add_argument("--gpus-per-learner", type=int, default=None, metavar="G",
                   help="with --slurm: GPUs each learner's task gets (--gres=gpu:G; 0: graded on CPU)")
    g.add_argument("--learners-per-task", type=int, default=None, metavar="K",
                   help="with --slurm: learners one task grades one after another (default: up to 3, keeping every "
                        "slot of the partition busy)")
    g.add_argument("--rerun-missing", action="store_true",
                   help="with --slurm: grade again only the learners of --report-dir with no finished grade "
                        "(cancelled, timed out, a task that failed), with the earlier variant")
    g.add_argument("--no-sandbox", action="store_true",
                   help="run learner code without bubblewrap (said on every report)")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    # SIGINT stops every run and reaps it (the KeyboardInterrupt below), also where the parent left SIGINT
    # ignored (a background job of a script, nohup): a batch grade's SIGINT to a checker over its budget.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A pipe or a CI log has no width; 120 columns keeps one check per few lines.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    try:
        if args.cmd == "list":
            return cmd_list(console)
        if args.cmd == "hint":
            return cmd_hint(args, console)
        if args.cmd == "doctor":
            _check_json_path(args.json)
            if args.timeout <= 0:
                raise UsageError(f"--timeout must be positive seconds, got {args.timeout}")
            try:  # imports torch: only when asked, so `checker list` stays quick
                from checker import doctor
            except ImportError as e:  # a broken install is the first thing a doctor should diagnose
                print(f"checker doctor: FAIL: cannot import torch or the course ({e}); run `make setup`",
                      file=sys.stderr)
                return 1
            return doctor.main(args, console)
        return cmd_grade(args, console)
    except UsageError as e:
        print(f"checker: {e}", file=sys.stderr)  # one line, unwrapped, whatever the terminal
        return 2
    except KeyboardInterrupt:
        print("checker: interrupted; every run was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
