"""A Slurm job that runs but writes nothing: lab 5's hangs, ended in seconds instead of at the deadline.

A job of lab 5 logs a line every step (~0.1 s; 50 ms of sleep in the preempted one) and prints as it starts.
One that is RUNNING and has written nothing for QUIET_S is stuck: a rank blocked in a collective its peers
never call (ranks that stopped at different steps), a loop that never ends, a batch shell waiting for a
step that has already gone. Without this watch such a job holds the grade until DEADLINE_S (150 s) and the
check can only say "still running"; with it the grade ends ~QUIET_S after the last line, and the check
names the job, its last step and run, and the log's tail.

QUIET_S = 25 s: the longest silence of a healthy job is its start (the batch shell's first echo, then
torchrun and its ranks importing torch and building the model before the first step): 3-8 s on 2 idle
cores, up to ~15 s under a load of 4. A job that is PENDING (queued, or between two runs of a requeue)
is never stalled: waiting for the node is the scheduler's time, not the job's.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from checker import slurm

QUIET_S = 25.0


def _written(runs: Path, job: str) -> int:
    """Bytes the job has written where the checker can see them: its step log folder (train.sbatch's
    out=$LAB5_RUNS/$SLURM_JOB_ID) and its Slurm log if it is named after the job id."""
    files = [*(runs / job).rglob("*"), *runs.glob(f"slurm-{job}.log"), *runs.glob(f"slurm-*_{job}.log")]
    total = 0
    for f in files:
        try:
            total += f.stat().st_size if f.is_file() else 0
        except OSError:  # a checkpoint renamed under our feet
            pass
    return total


def _last_step(runs: Path, job: str) -> str:
    """'step 5 of run 1' from the job's step log, or 'no step logged'."""
    last, run = None, None
    try:
        for line in (runs / job / "log.jsonl").read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "start":
                run = rec.get("restart_count", 0) + 1
            if "step" in rec:
                last = rec["step"]
    except OSError:
        pass
    if last is None:
        return "no step logged" + (f" in run {run}" if run else "")
    return f"last step {last}" + (f" of run {run}" if run else "")


class Stall:
    """`poll()` at every turn of a wait: the first stuck job's description (kept in `.why`), or None."""

    def __init__(self, runs: Path, jobs: list[str], quiet_s: float | None = None):
        self.runs, self.jobs = runs, list(jobs)
        self.quiet_s = quiet_s if quiet_s is not None else QUIET_S * float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))
        self.seen: dict[str, tuple[int, float]] = {}  # own job id -> (bytes written, when that count last changed)
        self.why: str | None = None

    def add(self, job: str | None) -> None:
        if job:
            self.jobs.append(job)

    def poll(self) -> str | None:
        if self.why or not self.jobs:
            return self.why
        states = slurm.states(self.jobs)
        if states is None:  # squeue did not answer: no verdict this turn
            return None
        now = time.monotonic()
        for job, state in states.items():
            size = _written(self.runs, job)
            before = self.seen.get(job)
            if state != "RUNNING" or before is None or size != before[0]:
                self.seen[job] = (size, now)
            elif now - before[1] > self.quiet_s:
                self.why = (f"job {job} stalled: RUNNING with nothing written for {self.quiet_s:.0f} s "
                            f"({_last_step(self.runs, job)}); cancelled. A rank waiting in a collective its peers "
                            "never call (did every rank stop at the same step?), or a loop that never ends")
        return self.why
