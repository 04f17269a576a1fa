"""Instructor mode: grade a folder of submissions, a few at a time, into one class report.

    checker grade lab2 --submissions hand-ins/ --parallel 1 --report-dir class-report/

Each folder in hand-ins/ is one learner's copy of labs/ (it holds lab2_ddp/, ...). Each learner is
graded by its own `checker grade` process against a private course tree (the course's shared core
and reference; the learner's lab folder), with a hidden variant (other seeds, data order, kill
steps, world sizes) so that hard-coded answers fail. A learner whose code hangs or crashes fails
their own checks; the batch goes on, whatever goes wrong with one learner (an error grading them becomes
their failed rows, with the reason). Each learner's runs are sandboxed (checker/sandbox.py); the course's
own files are digested before and after every learner, and a change fails that learner and stops the
batch trusting the tree (the learners after are not graded). As learners finish it rewrites class.csv
(learner, check, passed, value, ...), class.junit.xml (one testsuite per learner, for an LMS or CI),
class.json and class.html (checker/class_html.py); at the end it prints a summary table. On a Slurm cluster
(`--slurm`, checker/batch_slurm.py) the same grade_learner runs in the tasks of a job array, and the same
write_reports and summarize make the class report.
"""
from __future__ import annotations

import csv
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from checker import class_html, hints, likeness, placement, sandbox, seams, watchdog
from checker.harness import REPO_ROOT

LEARNER_BUDGET_S = 600  # one learner's whole grade: above the sum of any lab's run budgets (lab 2: 450 s)
# a stopped grade's SIGINT-to-SIGKILL wait when the batch itself is being stopped: under Slurm's KillWait
# (10 s on the course's Slurm, 30 s by default), so the inner checker reaps its runs before Slurm's SIGKILL
STOP_GRACE_S = 5
CAUSES = {"todo": "not written yet", "hang": "hung", "crash": "crashed", "error": "raised"}  # report.CheckResult.cause


def _course_tree(lab: str, submission: Path, into: Path) -> Path:
    """A private root: labs/ = the course's shared packages + this learner's lab folder. No solutions/: the
    checker's own reference runs import the course's (on the runs' PYTHONPATH). Symlinks in the submission
    are copied as links, never followed (a link to its parent folder would copy forever)."""
    folder = seams.SEAMS[lab].folder
    (into / "labs").mkdir(parents=True)
    (into / "labs" / "__init__.py").write_text("")
    seams.link_shared(into / "labs", REPO_ROOT)  # never the learner's copy of the core
    if (submission / folder).is_dir():
        shutil.copytree(submission / folder, into / "labs" / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for part in seams.SEAMS[lab].uses:  # the earlier labs its runs import: theirs, or the starter as in their clone
        src = submission / part if (submission / part).is_dir() else REPO_ROOT / "labs" / part
        shutil.copytree(src, into / "labs" / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return into


def learner_budget() -> float:
    return LEARNER_BUDGET_S * float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))


def failed(lab: str, reason: str, only: list[str] | None = None, seconds: float = 0.0, cause: str = "error") -> dict:
    """A learner's report when their grade produced none: every check failed with the reason."""
    checks = [{"name": c.name, "passed": False, "value": None, "threshold": None, "unit": "",
               "message": reason, "hint": c.hint, "status": "fail", "cause": cause, "frames": []}
              for c in _checks(lab) if not only or c.name in only]
    return {"lab": lab, "passed": False, "checks": checks, "seconds": seconds, "error": reason}


def gpu_blocks(gpus: list[str], parallel: int, world: int) -> list[list[str]]:
    """Disjoint GPUs per learner graded at once: `parallel` blocks, as large as the node allows (a larger block
    lets a learner's grade run its 2-3 runs side by side instead of one after the other). A block smaller than
    one run's ranks is refused (placement.Oversubscribed) before any learner is graded."""
    need = placement.gpus_needed(world, placement.ranks_per_gpu())  # one run of this lab
    each = len(gpus) // max(1, parallel)
    if each < need:
        raise placement.Oversubscribed(
            f"--parallel {parallel}: {parallel} learners at once need {need} GPU(s) each ({world}-rank runs), "
            f"{parallel * need} in all, but {len(gpus)} are visible ({','.join(gpus)}). "
            f"Lower --parallel to {max(1, len(gpus) // need)}.")
    return placement.GpuPool(gpus).split(parallel, each)


def grade_one(lab: str, submission: Path, variant: int, workdir: Path, only: list[str] | None = None,
              no_sandbox: bool = False, gpus: list[str] | None = None, device: str = "auto",
              budget: float | None = None) -> dict:
    """One learner: a separate `checker grade` process with a budget; returns its JSON report (or a synthesized one).
    `gpus`: this learner's own GPUs (CUDA_VISIBLE_DEVICES of its checker, which shares them out to its runs);
    `budget`: seconds for the whole grade (default learner_budget()); past it, every check fails as hung."""
    root = _course_tree(lab, submission, workdir / "tree")
    out = workdir / "report.json"
    budget = budget or learner_budget()
    cmd = [sys.executable, "-m", "checker", "grade", lab, "--root", str(root), "--json", str(out),
           "--variant", str(variant), "--device", device] + [a for o in only or [] for a in ("--only", o)] \
        + ["--no-sandbox"] * no_sandbox
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    t0 = time.monotonic()
    with open(workdir / "checker.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            _stop(proc, grace_s=15)
        except BaseException:  # the grading process itself is stopped (a Slurm task's SIGTERM): this grade too
            _stop(proc, grace_s=STOP_GRACE_S)
            raise
    if out.exists():
        return json.loads(out.read_text())
    tail = (workdir / "checker.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
    over = time.monotonic() - t0 >= budget
    reason = (f"hung: grading took over {budget:.0f} s (the per-learner budget) and was stopped"
              if over else tail[0])
    return failed(lab, reason, only, time.monotonic() - t0, cause="hang" if over else "error")


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGINT first: the inner checker stops and reaps its runs (they live in sessions of their own, out of
    reach of a killpg here); SIGKILL only if it doesn't within grace_s."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def submission_folders(submissions: Path) -> list[Path]:
    """One folder per learner, sorted by name (the class report's order)."""
    learners = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not learners:
        raise ValueError(f"{submissions} holds no submission folders")
    return learners


def _checks(lab: str):
    from checker import labs
    return labs.parent(lab).CHECKS


def grade_all(lab: str, submissions: Path, parallel: int, variant: int, report_dir: Path, console: Console,
              only: list[str] | None = None, no_sandbox: bool = False, gpu_blocks: list[list[str]] | None = None,
              device: str = "auto", no_hints: bool = False, verbose: bool = False,
              budget: float | None = None) -> bool:
    learners = submission_folders(submissions)
    report_dir.mkdir(parents=True, exist_ok=True)
    budget = budget or learner_budget()
    console.print(f"grading {len(learners)} submissions of {lab}, {parallel} at a time, variant {variant}"
                  + (f"; GPUs per learner: {' | '.join(','.join(b) for b in gpu_blocks)}" if gpu_blocks else ""))
    console.print(f"[dim]{hang_cost_note(parallel, budget)}[/]")
    t0 = time.monotonic()
    reports: dict[str, dict] = {}
    lock, trusted = threading.Lock(), {"changed_by": None, "digest": sandbox.course_digest()}
    blocks: queue.Queue = queue.Queue()  # each learner graded takes a block of GPUs and gives it back
    for block in gpu_blocks or [None] * parallel:
        blocks.put(block)
    with tempfile.TemporaryDirectory(prefix=f"checker-batch-{lab}-") as tmp:
        def job(p: Path):
            if trusted["changed_by"]:
                rep = with_hints(lab, p, failed(lab, f"not graded: the course's files changed during "
                                                     f"{trusted['changed_by']}'s grade; restore them (git status) "
                                                     "and grade again", only), no_hints)
            else:
                gpus = blocks.get()
                try:
                    d = Path(tmp) / p.name
                    d.mkdir()
                    rep, changed = grade_learner(lab, p, variant, d, trusted["digest"], only, no_sandbox, gpus,
                                                 device, budget, no_hints)
                finally:
                    blocks.put(gpus)
                if changed:
                    with lock:
                        trusted["changed_by"] = trusted["changed_by"] or p.name
            with lock:  # one learner's lines together, whatever the other threads print
                print_learner(console, p.name, rep, no_hints, verbose)
            with lock:  # the class report so far, on disk as each learner finishes
                reports[p.name] = rep
                write_reports(lab, variant, dict(sorted(reports.items())), report_dir)
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            list(pool.map(job, learners))
    return summarize(lab, dict(sorted(reports.items())), variant, only, time.monotonic() - t0, parallel, report_dir,
                     console, verbose)


def summarize(lab: str, reports: dict, variant: int, only: list[str] | None, wall: float, slots: int,
              report_dir: Path, console: Console, verbose: bool) -> bool:
    """After the batch (local or on Slurm): the table of learners x checks, what hangs cost, where the report
    is; True when every learner passed (a check NOT RUN is not a fail)."""
    partial = f"; partial: only {', '.join(only)} (--only), not a grade" if only else ""
    table = Table(title=f"{lab}: {len(reports)} learners, {wall:.0f} s (variant {variant}{partial})")
    names = [c.name for c in _checks(lab) if not only or c.name in only]
    for col in ("learner", "passed", *names):
        table.add_column(col)
    for learner, rep in reports.items():
        by = {c["name"]: c for c in rep["checks"]}
        table.add_row(learner, f"{sum(_status(c) == 'pass' for c in by.values())}/{len(names)}",
                      *(mark(by[n]) if n in by else "✗" for n in names))
    console.print(table)
    hung = hang_summary(reports, wall, slots)
    if hung:
        console.print(f"[yellow]{escape(hung)}[/]")
    console.print(f"class report: {report_dir}/class.csv, class.junit.xml, class.json, class.html"
                  + ("" if verbose else " (each failure's message, hint and, for a hang, where; -v prints them)"))
    return all(r.get("passed") or r.get("status") == "not_run" for r in reports.values())  # NOT RUN: not a fail


def grade_learner(lab: str, submission: Path, variant: int, workdir: Path, trusted_digest: dict,
                  only: list[str] | None = None, no_sandbox: bool = False, gpus: list[str] | None = None,
                  device: str = "auto", budget: float | None = None, no_hints: bool = False) -> tuple[dict, list[str]]:
    """One learner's entry of the class report, as both the local batch and a Slurm task make it: their grade
    (grade_one; an error grading them is their failed rows), failed instead if the course's files differ from
    `trusted_digest` afterwards (returned: the files changed), and the hint tiers they opened."""
    try:
        rep = grade_one(lab, submission, variant, workdir, only, no_sandbox, gpus, device, budget)
    except Exception as e:  # noqa: BLE001 - one learner's trouble is their row, never the batch's end
        rep = failed(lab, f"could not be graded: {type(e).__name__}: {str(e)[:300]}", only)
    changed = sandbox.changed_files(trusted_digest, sandbox.course_digest())
    if changed:
        rep = failed(lab, f"the course's files changed during this grade ({', '.join(changed[:3])}): "
                          "learner code wrote to the grader or the reference", only)
    folder = seams.SEAMS[lab].folder  # for the instructor to look at: a hand-in that holds the reference's code
    rep["reference_code"] = likeness.copied(submission / folder, REPO_ROOT / "solutions" / folder)
    return with_hints(lab, submission, rep, no_hints), changed


def with_hints(lab: str, submission: Path, rep: dict, no_hints: bool) -> dict:
    """The hint tiers this learner opened, from their own tree (checker/hints.py): in a class graded with
    --no-hints, any opened tier is flagged for the instructor."""
    folder = seams.SEAMS[lab].folder
    rep["hints_opened"] = hints.summary(submission / folder, REPO_ROOT / "labs" / folder)
    rep["hints_flagged"] = bool(no_hints and rep["hints_opened"])
    return rep


def print_learner(console: Console, name: str, rep: dict, no_hints: bool, verbose: bool) -> None:
    console.print(escape(learner_line(name, rep, no_hints)))
    if verbose:
        for line in learner_details(rep):
            console.print(f"    {escape(line)}")


def learner_line(name: str, rep: dict, no_hints: bool = False) -> str:
    """`  ed: 1/2 in 14 s; hung: reproducible (labs/lab1_baseline/seeding.py:12 in seed_everything)`: a hang, a
    TODO not written and a wrong value read differently at a glance."""
    statuses = [_status(c) for c in rep["checks"]]
    not_run = f", {statuses.count('not_run')} NOT RUN here" if "not_run" in statuses else ""
    why = []
    for cause, said in CAUSES.items():
        names = [c["name"] for c in rep["checks"] if _status(c) == "fail" and c.get("cause") == cause]
        if names:
            where = next((c["frames"][0] for c in rep["checks"] if c.get("cause") == cause and c.get("frames")), "")
            why.append(f"{said}: {', '.join(names)}" + (f" ({where})" if cause == "hang" and where else ""))
    opened = (f"; hints opened{' (hints were off)' if no_hints else ''}: {rep['hints_opened']}"
              if rep.get("hints_opened") else "")
    if rep.get("reference_code"):
        opened += f"; holds the reference's code: {', '.join(rep['reference_code'])}"
    return (f"  {name}: {statuses.count('pass')}/{len(statuses)}{not_run} in {rep.get('seconds', 0):.0f} s"
            + "".join(f"; {w}" for w in why) + opened)


def learner_details(rep: dict) -> list[str]:
    """-v: each failed check's message, hint and the learner's own frames (what class.html shows)."""
    out = []
    for c in rep["checks"]:
        if _status(c) != "fail":
            continue
        out.append(f"{c['name']}: {c['message']}")
        out += [f"  at {f}" for f in c.get("frames") or []]
        if c.get("hint"):
            out.append(f"  hint: {c['hint']}")
    return out


def hang_cost_note(parallel: int, budget: float, others: str | None = None) -> str:
    """What a hanging learner costs the batch, said before it starts (docs/workshop.md, 'What a hang costs')."""
    others = others or (f"the other {parallel - 1} slot(s) go on grading (--parallel)" if parallel > 1 else
                        "with --parallel 1 nobody else is graded meanwhile")
    return (f"a hang holds its learner's slot: {watchdog.STUCK_S:.0f} s where learner code loops (the watchdog), up "
            f"to its run's budget where it waits in a collective, never over {budget:.0f} s a learner "
            f"(--learner-budget); {others}")


def hang_summary(reports: dict, wall: float, parallel: int) -> str:
    """After the batch: how long the learners with a hang held their slots, against the batch's wall time."""
    hung = {name: rep.get("seconds", 0) for name, rep in reports.items()
            if any(c.get("cause") == "hang" for c in rep["checks"])}
    if not hung:
        return ""
    held = sum(hung.values())
    each = ", ".join(f"{n} {s:.0f} s" for n, s in hung.items())
    return (f"hangs: {len(hung)} learner(s) with a hung check held a grading slot for {held:.0f} s ({each}) of this "
            f"batch's {wall:.0f} s on {parallel} slot(s); bound it with --learner-budget S, or grade others "
            "meanwhile with --parallel")


def mark(c: dict) -> str:
    """A check's cell in the printed table: a hang and a TODO not written are not just a ✗."""
    return {"pass": "✓", "not_run": "NOT RUN"}.get(_status(c)) or {"todo": "TODO", "hang": "hung"}.get(
        c.get("cause", ""), "✗")


def _status(c: dict) -> str:
    """pass, fail or not_run (a check this machine could not run: checker/README.md)."""
    return c.get("status") or ("pass" if c["passed"] else "fail")


def write_reports(lab: str, variant: int, reports: dict, report_dir: Path) -> None:
    """Every file of the class report, each replaced whole (a reader never sees half a file)."""
    for name, write in (("class.csv", lambda p: write_csv(reports, p)),
                        ("class.junit.xml", lambda p: write_junit(lab, reports, p)),
                        ("class.json", lambda p: p.write_text(json.dumps({"lab": lab, "variant": variant,
                                                                          "reports": reports}, indent=1))),
                        ("class.html", lambda p: p.write_text(class_html.page(lab, variant, reports)))):
        tmp = report_dir / f".{name}.tmp"
        write(tmp)
        os.replace(tmp, report_dir / name)


def write_csv(reports: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["learner", "check", "passed", "value", "threshold", "unit", "message", "status", "hints_opened",
                    "hint", "cause", "frames", "reference_code"])
        for learner, rep in reports.items():
            for c in rep["checks"]:  # the hint where the learner has something to fix (a NOT RUN's: how to run it)
                w.writerow([learner, c["name"], c["passed"], c["value"], c["threshold"], c["unit"], c["message"],
                            _status(c), rep.get("hints_opened", ""), "" if c["passed"] else c.get("hint", ""),
                            c.get("cause", ""), "; ".join(c.get("frames") or []),
                            "; ".join(rep.get("reference_code") or [])])


def write_junit(lab: str, reports: dict, path: Path) -> None:
    suites = ET.Element("testsuites", name=f"checker {lab}")
    for learner, rep in reports.items():
        checks = rep["checks"]
        statuses = [_status(c) for c in checks]
        suite = ET.SubElement(suites, "testsuite", name=learner, tests=str(len(checks)),
                              failures=str(statuses.count("fail")), skipped=str(statuses.count("not_run")),
                              time=f"{rep.get('seconds', 0):.1f}")
        for c, status in zip(checks, statuses):
            case = ET.SubElement(suite, "testcase", classname=f"{lab}.{learner}", name=c["name"])
            if status == "not_run":  # this machine could not run it: skipped, not the learner's failure
                ET.SubElement(case, "skipped", message=f"{c['message']} — to run it: {c['hint']}"[:500])
            elif not c["passed"]:
                fail = ET.SubElement(case, "failure", message=c["message"][:500], type=c.get("cause") or "fail")
                fail.text = "".join(f"at {f}\n" for f in c.get("frames") or []) + c["hint"]
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
