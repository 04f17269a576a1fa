"""Lab 5's worker side (learner code runs only here): the learner's sweep submitted, its metrics collected and
reported, and PreemptionFlag with resume's refusal on 2 ranks. The jobs themselves run under Slurm (plan.py)."""
from __future__ import annotations

from checker import seams
from checker.labs._common import probe
from checker.labs.lab5 import LAB, refuse


def task_probe(ctx, target):
    return probe(LAB, target)


def task_sweep(ctx, target, runs, train_args, world_sizes):
    seam = seams.load(LAB, target)
    return {"array": str(seam.submit_sweep(world_sizes, runs, train_args))}


def task_collect(ctx, target, jobcomp, runs, csv_path):
    seam = seams.load(LAB, target)
    rows = seam.collect(jobcomp, runs)
    seam.write_csv(rows, csv_path)
    return {"csv": csv_path}


def task_report(ctx, target, csv_path, out):
    import csv

    seam = seams.load(LAB, target)
    with open(csv_path, newline="") as f:
        table = seam.scaling_table(list(csv.DictReader(f)))
    png, md = seam.write_report(csv_path, out)
    return {"table": [{k: (v if k != "jobs" else list(map(str, v))) for k, v in t.items()} for t in table],
            "png": str(png), "md": str(md)}


def task_flag(ctx, target, signal_at):
    """PreemptionFlag on 2 ranks where only rank 1 is signalled (SIGTERM to itself before step signal_at), as one
    node of a job may hear the warning before another: should_stop, called by both at every step, must say True on
    both from that step on. Per rank it would stop one rank and leave the other in its next collective.
    Then, on the same 2 ranks, resume's refusal of a checkpoint from another world size (refuse.py)."""
    import os
    import signal
    import time

    from labs.common import dist as cdist

    env = cdist.init(timeout_s=20)
    seam = seams.load(LAB, target)
    flag = seam.PreemptionFlag()
    flag.install()
    said = []
    for step in range(signal_at + 3):
        if step == signal_at and env.rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler has run before this step's should_stop
        said.append(bool(flag.should_stop(env.device)))
    refusal, err = ctx.attempt(lambda: refuse.save_then_resume_alone(ctx, seam, target, env))
    cdist.teardown()  # (a no-op once the refusal has torn the group down)
    return {"rank": env.rank, "said": said, "refusal": {"raised_outside": err} if err else refusal}


TASKS = {"probe": task_probe, "sweep": task_sweep, "collect": task_collect, "report": task_report, "flag": task_flag}
