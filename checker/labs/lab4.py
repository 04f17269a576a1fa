"""Lab 4 checks: each incident fixed (the job completes under the incident's conditions and trains
correctly) and diagnosed (the right cause, and an evidence line that really occurs in the log of
the faulty job, which the checker runs itself).

Fixed runs: the learner's job (their incidentN.py pieces in the course's job.py) under torchrun,
conditions from the course's own scenarios.py, moved by the hidden variant. The worker times the
learner's after_step/train_step and counts all-reduced bytes itself. Faulty runs: the pristine
starter, generated from solutions/ into a private tree, launched by its run.py exactly as a
learner runs it, at the public variant (what the learner saw); its log is kept under runs/lab4/evidence/
(reused while the sources are unchanged).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import socket
import sys
import traceback
from pathlib import Path

from checker import seams
from checker.harness import REPO_ROOT, Harness
from checker.labs._common import Check, CollectiveRecorder, digest, probe
from checker.labs._held_save import TORN, HeldSave

LAB = "lab4"
WORLD_SIZE = 2
SOLUTIONS_IN_WORKER = ("the incidents are the course's own jobs (solutions/lab4_debugging), launched and read "
                       "by the learner's runs (checker/reach.py)")
GRADE_SECONDS = 60         # ~12 two-rank jobs of yours, the faulty jobs' logs already kept (runs/lab4/evidence/)
FIRST_GRADE_SECONDS = 150  # the first grade of a course version also runs the ~11 faulty torchruns (CI: 100-124 s)
INCIDENTS = range(1, 9)
# The process-group timeout of your jobs in the grade (Job.timeout_s, lower where the incident's own is): a step of
# the tiny model takes milliseconds and every collective of a working job finds its peer within one, so a rank
# that waits 10 s is waiting for a collective its peer never calls (the reference passes at a load of 15 on 2 cores).
# With the job's default (30 s) a rank of yours skipping a collective cost each of the grade's 10 jobs 30 s, 3 jobs
# at a time: measured, one job 34 s to FAIL, now 16 s.
FIXED_TIMEOUT_S = 10.0
WHERE = "labs/lab4_debugging"

HINT_TASKS = {1: "incident1.join", 2: "incident2.skip_step", 3: "incident3.after_step", 4: "incident4.shard_indices",
              5: "incident5.save_checkpoint", 6: "incident6.configure_network", 7: "incident7.launch_args",
              8: "incident8.train_step"}  # each incident's task for `checker hint lab4 <task>`
# Where to look and what to ask of the evidence, never the diagnosis (that is the lab).
_FIXED_HINTS = {
    1: f"{WHERE}/incident1.py join(): compare the launch environment each rank logs first with the process group "
       "join() creates from it: where does each value the group is given come from?",
    2: f"{WHERE}/incident2.py skip_step(): where is each rank when the job stalls (the log holds every rank's "
       "stack), and at which step? Your fix must hold whichever rank and step hit the bad batch.",
    3: f"{WHERE}/incident3.py after_step(): read the per-rank 'rank times' lines: who is busy outside train_step, "
       "doing what, and how often? The dashboard still needs a validation loss every job.eval_every steps.",
    4: f"{WHERE}/incident4.py shard_indices(): read each rank's 'samples this epoch' line and the last step each "
       "rank reached: do the ranks agree, for every n and world size?",
    5: f"{WHERE}/incident5.py save/load_checkpoint(): read the line logged right after the resume and compare the "
       "resumed losses with the uninterrupted run's: what does the next step read that the checkpoint may not hold?",
    6: f"{WHERE}/incident6.py configure_network(): read the first error each rank prints at start-up: what does it "
       "name, and where does that name come from? The checker moves the name the cluster exports.",
    7: f"{WHERE}/incident7.py launch_args(): read the second job's first error: what do two jobs started with these "
       "options both ask the node for?",
    8: f"{WHERE}/incident8.py train_step(): read what the job measures before it trains, then count the "
       "all-reduces one optimizer step issues and what each costs at that rate.",
}
# A resume that found the checkpoint the kill left half-written (the job saves twice; the kill lands in the second)
_TORN_HINT = ((TORN, "The checkpoint on disk is half-written: the job was killed while writing it, and the file it "
                     "wrote in place is all a resume finds. Write each file to a temporary name in the same folder and "
                     "rename it over the old one once complete (ckpt.atomic_save does both), the main file last: a "
                     "kill then leaves the previous checkpoint whole (checker hint lab4 incident5.save_checkpoint)."),)
# The pristine starter runs (it is the faulty job): its checks fail on what the checker measures, never on a TODO.
CHECKS = []
for _n in INCIDENTS:
    CHECKS.append(Check(f"fixed_incident{_n}", f"incident {_n}'s job, your code, under its conditions: completes "
                        "within budget, ranks in sync, loss falls" + {3: ", eval cost amortised", 5: ", resume "
                        "bit-identical", 6: ", gloo's interface set", 7: ", two jobs at once", 8: ", one gradient "
                        "all-reduce per step, .grad the mean gradient"}.get(_n, ""),
                        f"{_FIXED_HINTS[_n]} (checker hint lab4 {HINT_TASKS[_n]})", starter_runs=True,
                        symptoms=_TORN_HINT if _n == 5 else ()))
    CHECKS.append(Check(f"diagnosed_incident{_n}", f"diagnosis.toml [incident{_n}]: cause from the README's list; "
                        "evidence occurs in the checker's log of the faulty job",
                        f"Run `python -m labs.lab4_debugging.run {_n}`, read runs/lab4/incident{_n}.log (or the "
                        f"checker's runs/lab4/evidence/), then fill [incident{_n}] in {WHERE}/diagnosis.toml "
                        f"(checker hint lab4 {HINT_TASKS[_n]})",
                        starter_runs=True))


# Forensics (forensics.py): the learner's analyser, graded on flight-recorder dumps of the course's faulty job
# (desync.py), run by the checker at the grade's variant: which rank diverges, at which step, is hidden.
CHECKS.append(Check(
    "desync_found", "forensics.find_desync on the flight-recorder dumps of 5 faulty 3-rank jobs the checker ran "
    "(hidden rank and step; point-to-point entries in every dump, one case's ring wrapped): the rank that "
    "diverged, the collective sequence number, the kind of mismatch",
    f"{WHERE}/forensics.py find_desync(): lay the ranks' entries side by side by collective_seq_id; at the first "
    "disagreement, which rank is the odd one out (not the first to time out, not the one with fewest entries)? "
    "Try it on `python -m labs.lab4_debugging.desync KIND`'s dumps (checker hint lab4 forensics.find_desync)"))
HINT_TASKS["desync"] = "forensics.find_desync"
CHECKS.append(Check(
    "slow_rank_found", "forensics.slow_rank on the profiler traces of linkprobe.py's 3 ranks, one rank's link "
    "slowed (hidden rank and rate): that rank, and its link's rate within a band",
    f"{WHERE}/forensics.py slow_rank(): a transfer is as slow as the slower of its two ends; which rank is in every "
    "slow pair, and how many bytes per second did those transfers move (GB/s: 10^9 bytes, not bits)? Try it on "
    "`python -m labs.lab4_debugging.linkprobe`'s traces (checker hint lab4 forensics.slow_rank)"))
HINT_TASKS["slow_rank"] = "forensics.slow_rank"
CHECKS.append(Check(
    "memory_leak_found", "forensics.find_memory_leak on memory snapshots of memleak.py's training loop, which the "
    "checker recorded (hidden batch, sequence, steps): the leaking line of 3 leaks exactly, its bytes per step within "
    "a band; None for the clean run",
    f"{WHERE}/forensics.py find_memory_leak(): which allocations are never freed, which line of the script made "
    "each (not torch's frame), and does that line leave bytes alive on every pass or only once? Try it on `python -m "
    "labs.lab4_debugging.memleak logits`'s snapshot, and open it in https://pytorch.org/memory_viz "
    "(checker hint lab4 forensics.find_memory_leak)"))
HINT_TASKS["memory_leak"] = "forensics.find_memory_leak"
CHECKS.append(Check(
    "slow_rank_found_netns", "forensics.slow_rank on the link probe over a real link: one network namespace per rank "
    "on a bridge, one rank's cable tbf-shaped (hidden rank and rate): that rank, and the rate within a band",
    "The same slow_rank as slow_rank_found, on traces of a real shaped link: a kernel-buffered send returns early; "
    "which spans cover the whole transfer? (checker hint lab4 forensics.slow_rank)", needs=("root",)))
# every check runs the course's own jobs and conditions (solutions/lab4_debugging): none runs in a class handout
CHECKS = [dataclasses.replace(c, needs=(*c.needs, "reference")) for c in CHECKS]


def course_module(name: str):
    """One of the course's own lab 4 modules (never the graded tree's copy: the faulty jobs are the checker's)."""
    path = REPO_ROOT / "solutions" / "lab4_debugging" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_lab4_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def scenarios():
    """The course's own scenarios.py (never the graded tree's copy: the conditions are the checker's)."""
    path = REPO_ROOT / "solutions" / "lab4_debugging" / "scenarios.py"
    spec = importlib.util.spec_from_file_location("_lab4_scenarios", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- worker side
def task_probe(ctx, target):
    return probe(LAB, target)


def _shard_cases(seam) -> list[dict]:
    """shard_indices at several sizes: lengths, range, distinct samples."""
    cases = []
    for n, world in ((49, 2), (48, 2), (100, 3), (101, 4), (7, 3)):
        shards = [list(map(int, seam.shard_indices(n, r, world))) for r in range(world)]
        flat = [i for s in shards for i in s]
        cases.append({"n": n, "world": world, "lengths": [len(s) for s in shards],
                      "in_range": all(0 <= i < n for i in flat), "distinct": len(set(flat)), "total": len(flat)})
    return cases


def _accum_case(train_step, device) -> dict:
    """Incident 8's contract on the side, after the job, on every rank: train_step on a fresh tiny GPT with lr 0 and
    the same 4 micro-batches everywhere; its .grad against the gradient of the micro-batches' mean loss, computed on
    an unwrapped copy. Eval mode (no dropout): both passes see the same numbers. The ranks' gradients are identical,
    so their average is each one (within rounding): the ratio of norms is 1.0, or k = 4 for a sum over micro-batches."""
    import copy

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import labs.common.dist as cdist
    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.model import build_model, get_config

    torch.manual_seed(0)
    model = build_model(get_config("tiny")).to(device).eval()
    ref = copy.deepcopy(model)
    data = TokenFile.open(ensure_corpus(256))
    micro = [data.batch([2 * i, 2 * i + 1], 64, device) for i in range(4)]
    train_step(DDP(model, device_ids=cdist.ddp_device_ids(device)), torch.optim.SGD(model.parameters(), lr=0.0), micro)
    (sum(ref(x, y)[1] for x, y in micro) / len(micro)).backward()
    got = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()])
    want = torch.cat([p.grad.flatten() for p in ref.parameters()])
    return {"k": len(micro), "ratio": float(got.norm() / want.norm()),
            "rel_diff": float((got - want).abs().max() / want.abs().max())}


def task_job(ctx, target, job, on_saved_cue=False, parts=()):
    """The learner's job.run under this run's conditions; what the checker measures, per rank. `parts`: seam
    functions rank 0 also checks on the side first (each fails alone), so they cost no process of their own;
    "accum" (incident 8), train_step's gradient checked on every rank after the job (_accum_case).
    on_saved_cue (incident 5, a job that saves at save_at and every save_every steps after): the first checkpoint
    completes, the second is killed while rank 0 writes the weights (_held_save.py: half the file, then the kill)."""
    import time

    import torch
    import torch.distributed as dist

    rec = CollectiveRecorder()  # before learner code is imported: counts every dist.all_reduce
    out = ctx.partial
    held = None
    if on_saved_cue:  # before learner code is imported too; before job.run seeds, so no draw of the run's is taken
        from labs.common.model import build_model, get_config
        # a file of at least half the weights' bytes holds the weights; a rank's RNG file is ~20 KB of 480 KB
        weights = sum(p.numel() * p.element_size() for p in build_model(get_config("tiny")).parameters())
        held = HeldSave(ctx, out, min_bytes=weights // 2, together=False)
    seam = seams.load(LAB, target)
    if int(os.environ.get("RANK", 0)) == 0:
        if "shards" in parts:
            out["shards"], out["shards_error"] = ctx.attempt(lambda: _shard_cases(seam))
        if "launch_args" in parts:
            out["launch_args"], out["launch_args_error"] = ctx.attempt(lambda: list(seam.launch_args(WORLD_SIZE)))
    timers = {"after_step": 0.0, "train_step": 0.0}
    tokens = {"after_step": 0, "train_step": 0}  # token positions the model ran forward inside each
    started: list[bool] = []
    phase: list[str] = []
    hooked: set[int] = set()

    def on_forward(module, args):
        if phase and args:
            tokens[phase[-1]] += args[0].numel()  # (batch, seq) token ids

    def count_tokens(model):
        if id(model) not in hooked:
            hooked.add(id(model))
            model.register_forward_pre_hook(on_forward)

    def timed(name):
        def wrap(fn):
            def wrapper(*a, **k):
                if not started:  # count from the first training step on (not the job's link check)
                    started.append(True)
                    rec.start()
                count_tokens(getattr(a[0], "module", a[0]))  # train_step gets the DDP wrapper, after_step the model
                phase.append(name)
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    timers[name] += time.perf_counter() - t0
                    phase.pop()
            return wrapper
        return wrap

    unwrapped_train_step = seam.train_step
    for name in timers:  # through the seam: every module of the learner's package that holds the function
        seams.wrap(seam, name, timed(name))

    def saved():
        if held is not None and "complete_at" not in out:  # the first checkpoint: complete, what a resume gets
            out["complete_at"], out["rank"] = job["save_at"], dist.get_rank()
            ctx.write(out)  # a rank the kill finds in the learner's barrier reports no more
            held.armed = True  # the next torch.save of the weights is cut in half and the run killed inside it
            return
        out["saved"], out["held"] = True, False  # no torch.save of the weights: the kill lands after the save
        ctx.write(out)
        dist.barrier()  # every rank has reported before rank 0 cues the kill
        ctx.cue("saved")

    try:
        res = seam.run(seam.Job(**job), on_saved=saved if on_saved_cue else None)
    except BaseException:
        traceback.print_exc()  # into the run's log, as torchrun would show it
        raise
    calls = rec.stop()
    model = res.pop("model")
    env = res.pop("env")
    params = sum(p.numel() for p in model.parameters())
    out.update(res)
    out.update(world_size=env.world_size, rank=env.rank, digest=digest(model.named_parameters()),
               finite=all(bool(torch.isfinite(p).all()) for p in model.parameters()), params=params,
               reduced_numel=sum(n for _, n in calls), timers=timers, tokens=tokens,
               losses=[float(x).hex() for x in res["losses"]],
               ifname=os.environ.get("GLOO_SOCKET_IFNAME"), nccl_ifname=os.environ.get("NCCL_SOCKET_IFNAME"),
               interfaces=[n for _, n in socket.if_nameindex()])
    if "accum" in parts:
        out["accum"], out["accum_error"] = ctx.attempt(lambda: _accum_case(unwrapped_train_step, env.device))
    import labs.common.dist as cdist
    cdist.teardown()
    return out


def task_desync(ctx, target, case, out):
    """The course's faulty job (desync.py, never the graded tree's) on every rank, its flight recorder dumped into
    `out`; the faulty rank also returns where it diverged (the answer key). No learner code is imported here."""
    desync = course_module("desync")
    res = desync.train(desync.Case(**case), Path(out))
    import labs.common.dist as cdist
    cdist.teardown(timeout_s=5)
    return res


def task_linkprobe(ctx, target, out, slow_rank, rate_gbps):
    """The course's link probe (linkprobe.py) on every rank, one rank's link slowed; no learner code here."""
    probe = course_module("linkprobe")
    path = probe.probe(Path(out), slow_rank, rate_gbps)
    import labs.common.dist as cdist
    cdist.teardown(timeout_s=5)
    return {"trace": path}


def task_memleak(ctx, target, cases, out):
    """The course's leaking training loop (memleak.py, never the graded tree's), one snapshot per case pickled into
    `out`, with the answer key: the line the kept tensors are allocated at, and the bytes a step keeps (measured
    apart from the recording). No learner code is imported here."""
    memleak = course_module("memleak")
    from labs.instruments.memory_history import save

    keys = {}
    for case in cases:
        c = memleak.Case(**case)
        save(memleak.train(c), Path(out) / f"{c.kind}.pickle")
        keys[c.kind] = {"file": memleak.__file__, "line": memleak.leak_line(c.kind),
                        "bytes_per_step": memleak.saved_bytes(c), "steps": c.steps}
    return {"keys": keys}


def task_forensics(ctx, target, cases, traces, netns_traces=(), snapshots=None):
    """The learner's analysers on the evidence the checker made: find_desync on each case's dumps, slow_rank on the
    link probe's traces (emulated link; real link), find_memory_leak on each memory snapshot (of `source`); each
    call on its own (one that raises fails alone)."""
    seam = seams.load(LAB, target)

    def call(fn, paths):
        answer, err = ctx.attempt(lambda: fn(list(paths)))
        return {"answer": answer if isinstance(answer, dict) else {"returned": repr(answer)[:200]}, "error": err}

    out = {"answers": {name: call(seam.find_desync, paths) for name, paths in cases.items()}}
    if traces:
        out["slow_rank"] = call(seam.slow_rank, traces)
    if netns_traces:
        out["slow_rank_netns"] = call(seam.slow_rank, netns_traces)
    if snapshots:
        from labs.instruments.memory_history import load

        def leak(path):
            answer, err = ctx.attempt(lambda: seam.find_memory_leak(load(path), snapshots["source"]))
            ok = answer is None or isinstance(answer, dict)
            return {"answer": answer if ok else {"returned": repr(answer)[:200]}, "error": err}
        out["memory"] = {kind: leak(path) for kind, path in snapshots["paths"].items()}
        out["snapshots"] = snapshots["paths"]  # the evaluator reads the line a learner named there
    return out


TASKS = {"probe": task_probe, "job": task_job, "desync": task_desync, "linkprobe": task_linkprobe,
         "memleak": task_memleak, "forensics": task_forensics}


# ---------------------------------------------------------------- checker side
def pristine_tree(workdir: Path) -> Path:
    """The starter as generated from solutions/ (the faulty job), in a private tree that imports the course's core."""
    from checker.starters import generate

    root = workdir / "pristine"
    (root / "labs").mkdir(parents=True, exist_ok=True)
    (root / "labs" / "__init__.py").write_text("")
    seams.link_shared(root / "labs", REPO_ROOT)
    for path, text in generate(REPO_ROOT).items():
        rel = path.relative_to(REPO_ROOT / "labs")
        if rel.parts[0] == seams.SEAMS[LAB].folder:
            (root / "labs" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "labs" / rel).write_text(text)
    return root


def evidence_key(root: Path, variant: int) -> str:
    """Faulty logs are reused while the faulty sources, torch and the device choice are the same."""
    from importlib.metadata import version  # not `import torch`: the checker's own process never loads it

    h = hashlib.sha256(f"{variant} {version('torch')} {os.environ.get('COURSE_DEVICE', 'auto')}".encode())
    for p in sorted((root / "labs" / seams.SEAMS[LAB].folder).glob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def evidence_dir() -> Path:
    return REPO_ROOT / "runs" / "lab4" / "evidence"


def faulty_specs(h: Harness, variant: int, need: set[int]) -> tuple[dict[int, str], list[dict], Path, str]:
    """Logs of the faulty job (the pristine starter) already kept for these sources, and run specs for the rest."""
    tree = pristine_tree(h.workdir)
    key, folder = evidence_key(tree, variant), evidence_dir()
    logs = {}
    for n in need:
        log, stamp = folder / f"incident{n}.log", folder / f"incident{n}.key"
        if log.exists() and stamp.exists() and stamp.read_text() == key:
            logs[n] = log.read_text(errors="replace")
    # run.py itself from the pristine tree, as a learner runs it: PYTHONPATH puts that tree first.
    env = {"PYTHONPATH": os.pathsep.join([str(tree), str(REPO_ROOT)])}
    # run.py stops a job it thinks hung after the scenario's budget; a loaded machine stretches it as it does ours
    scale, sc = float(os.environ.get("CHECKER_BUDGET_SCALE", "1")), scenarios()
    specs = [dict(name=f"faulty{n}", task="", budget_s=120, env=env,
                  argv=[sys.executable, "-m", "labs.lab4_debugging.run", str(n), "--variant", str(variant),
                        "--budget", str(sc.scenario(n, variant).budget_s * scale),
                        "--log", str(h.workdir / f"incident{n}.faulty.log")]) for n in sorted(need - set(logs))]
    return logs, specs, folder, key


def keep_faulty_logs(h: Harness, logs: dict, specs: list[dict], folder: Path, key: str) -> None:
    for spec in specs:
        n = int(spec["name"].removeprefix("faulty"))
        path = h.workdir / f"incident{n}.faulty.log"
        logs[n] = path.read_text(errors="replace") if path.exists() else ""
        # a job run.py had to stop ("hung": a machine too loaded to start it in time) is not kept: its log may lack
        # the lines a diagnosis quotes, and kept it would fail every later grade of these sources
        if logs[n] and not re.search(r"^# outcome: .*hung", logs[n], re.M):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"incident{n}.log").write_text(logs[n])
            (folder / f"incident{n}.key").write_text(key)


def grade(h, checks):
    from checker.labs import lab4_eval, lab4_forensics

    sc = scenarios()
    v = h.variant
    names = {c.name for c in checks}
    fixed = {n for n in INCIDENTS if f"fixed_incident{n}" in names}
    diagnosis = lab4_eval.read_diagnosis(h.root / h.target / seams.SEAMS[LAB].folder / "diagnosis.toml")
    # Only a diagnosis that names the right cause needs the faulty job's log to check its evidence against.
    diagnosed = {n for n in INCIDENTS if f"diagnosed_incident{n}" in names and lab4_eval.needs_log(n, diagnosis)}

    # A collective that waits longer than this for its peer is a hang (scaled as the run budgets are)
    wait_s = FIXED_TIMEOUT_S * float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))

    def job(n, **over):
        s = sc.scenario(n, v).job
        return {**s, "timeout_s": min(s.get("timeout_s", wait_s), wait_s), **over}

    def job_spec(n, name=None, parts=(), **over):
        s = sc.scenario(n, v)
        # s.env (SLURM_NTASKS, COURSE_IFNAME) is read by the job's code: a fork of the run server carries it,
        # where a fresh start costs each job two imports of torch (incidents 1 and 6: 20-40 s on 2 loaded cores)
        return dict(name=name or f"fixed{n}", task="job", nproc=s.nproc, budget_s=60, env=s.env, env_read_late=True,
                    args=dict(job=job(n, **over), parts=list(parts)))

    ckpt = str(h.workdir / "incident5.ckpt.pt")
    side = {4: ["shards"], 3: ["launch_args"] if 7 in fixed else [], 8: ["accum"]}
    phase1 = [job_spec(n, parts=side.get(n, ())) for n in sorted(fixed) if n not in (5, 7)]
    if 7 in fixed and 3 not in fixed:
        phase1.append(job_spec(3, parts=["launch_args"]))
    if 5 in fixed:
        phase1 += [job_spec(5, "fixed5_full", save_at=None),
                   dict(job_spec(5, "fixed5_preempted", ckpt=ckpt), kill_on="saved",
                        args=dict(job=job(5, ckpt=ckpt, save_every=2), on_saved_cue=True,
                                  parts=[]))]
    desync = course_module("desync") if "desync_found" in names else None
    if desync:  # the faulty jobs of forensics.py: one per kind, at this grade's variant, all their dumps kept here
        for kind in desync.KINDS:
            c = desync.case(kind, v)
            # a rank descheduled longer than the timeout in the job's healthy part would spoil the evidence
            c.timeout_s *= float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))
            phase1.append(dict(name=f"desync_{kind}", task="desync", nproc=desync.WORLD, budget_s=60,
                               args=dict(case=vars(c), out=str(h.workdir / "dumps" / kind))))
    link = course_module("linkprobe") if "slow_rank_found" in names else None
    slow_at = link.rates(v) if link else None
    if link:
        phase1.append(dict(name="linkprobe", task="linkprobe", nproc=link.WORLD, budget_s=60,
                           args=dict(out=str(h.workdir / "link"), slow_rank=slow_at[0], rate_gbps=slow_at[1])))
    memleak = course_module("memleak") if "memory_leak_found" in names else None
    if memleak:  # the leaking loop, every kind at this grade's variant, in a process of its own
        phase1.append(dict(name="memleak", task="memleak", budget_s=60,
                           args=dict(cases=[vars(memleak.case(k, v)) for k in memleak.KINDS],
                                     out=str(h.workdir / "memory"))))
    real = course_module("linkprobe") if "slow_rank_found_netns" in names else None
    real_at = real.netns_rates(v) if real else None
    if real:  # it makes namespaces: the host's privileges, not the grade's sandbox (as lab 8's link)
        phase1.append(dict(name="linkprobe_netns", task="", budget_s=90, sandbox=False,
                           env={"PYTHONPATH": str(REPO_ROOT)},
                           argv=[sys.executable, "-m", "solutions.lab4_debugging.linkprobe", "--slow-rank",
                                 str(real_at[0]), "--netns-rate-mbit", str(real_at[1]),
                                 "--out", str(h.workdir / "reallink")]))
    # Evidence is checked against the faulty job as the learner ran it (the public variant): a hidden variant
    # renames the interface or moves the NaN to another rank, and the error a learner quoted would change with it.
    logs, faulty, folder, key = faulty_specs(h, 0, diagnosed) if diagnosed else ({}, [], None, "")
    # Three at a time on 2 cores: the faulty jobs spend most of their time waiting for a timeout.
    runs = h.run_many(faulty + phase1, parallel=3)
    if faulty:
        keep_faulty_logs(h, logs, faulty, folder, key)
    phase2 = [job_spec(5, "fixed5_resumed", ckpt=ckpt, save_at=None, resume=True)] if 5 in fixed else []
    launch = lab4_eval.checked_launch(runs.get("fixed3")) if 7 in fixed else None
    busy = None
    if isinstance(launch, list):
        busy = _hold(sc.BUSY_PORT)  # "another job" holds torchrun's default port, as on a shared node
        # The two jobs and the port's holder must share one network, as jobs on one node do: in a sandbox of
        # its own each job would have a loopback to itself, and no launch could ever clash.
        phase2 += [{**job_spec(7, f"fixed7_job{j}"), "launch": launch, "sandbox": False} for j in range(2)]
    if desync or link or real or memleak:  # the learner's analysers, in one process, on the evidence produced
        dumps = {k: [str(h.workdir / "dumps" / k / f"rank{r}") for r in range(desync.WORLD)]
                 for k in (desync.KINDS if desync else ())}
        dumps = {k: p for k, p in dumps.items() if all(Path(x).exists() for x in p)}
        traces = [str(h.workdir / "link" / f"trace_rank{r}.json") for r in range(link.WORLD)] if link else []
        traces = traces if all(Path(t).exists() for t in traces) else []
        netns = [str(h.workdir / "reallink" / f"trace_rank{r}.json") for r in range(real.WORLD)] if real else []
        netns = netns if all(Path(t).exists() for t in netns) else []
        snapshots = {"source": memleak.__file__, "paths": {  # source: the file as the snapshots' frames name it
            k: str(h.workdir / "memory" / f"{k}.pickle") for k in memleak.KINDS
            if (h.workdir / "memory" / f"{k}.pickle").exists()}} if memleak else None
        phase2.append(dict(name="forensics", task="forensics", budget_s=60,
                           args=dict(cases=dumps, traces=traces, netns_traces=netns, snapshots=snapshots)))
    try:
        runs.update(h.run_many(phase2, parallel=3))
    finally:
        if busy is not None:
            busy.close()
    results = [lab4_forensics.desync_found(c, runs, desync.KINDS) if c.name == "desync_found"
               else lab4_forensics.slow_rank_found(c, runs, *slow_at) if c.name == "slow_rank_found"
               else lab4_forensics.slow_rank_found(c, runs, real_at[0], real_at[1] / 8e3, "linkprobe_netns",
                                                   "slow_rank_netns", command=True) if c.name == "slow_rank_found_netns"
               else lab4_forensics.memory_leak_found(c, runs) if c.name == "memory_leak_found"
               else lab4_eval.evaluate(c, runs, logs, diagnosis, sc.scenario, v, launch) for c in checks]
    return results, lab4_eval.info(runs, logs)


def _hold(port: int):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
    except OSError:
        pass  # something on this machine holds it already: the same condition
    return s
