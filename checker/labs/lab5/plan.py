"""Lab 5's parent side: the jobs a grade submits to Slurm and what it does to them (the learner's batch script,
preempted twice; the learner's sweep), the worker runs beside them (the flag, collect and report runs), and each
check's verdict from its evaluator (checks.py) as soon as what it reads exists."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from checker import seams, slurm
from checker.labs._common import Check
from checker.labs.lab5 import (
    DEADLINE_S,
    LAB,
    PREEMPT_ARGS,
    SWEEP,
    TRAIN_ARGS,
    WARN_AT,
    WORLD_SIZE,  # noqa: F401  (the parent side's)
)
from checker.labs.lab5.checks import (
    CHECKS,  # noqa: F401  (the parent side's)
    read_events,
    steps_of_run,
)
from checker.labs.lab5.port import PortHold, rendezvous_port
from checker.labs.lab5.stall import Stall
from checker.report import CheckResult

GRADE_SECONDS = 120  # two requeue round trips (~7 s each on slurm_local.sh's settings) and four jobs in one queue


def preempt(job: str, log: Path, deadline: float, notes: list[str], warn_at: int = WARN_AT, stall=None,
            hold=None) -> None:
    """Interrupt run 1 with the warning, run 2 with a plain requeue; note what was done. With a PortHold, take run
    1's rendezvous port while the job waits to be requeued (port.py)."""
    port = None
    for restart, action in ((0, "warning"), (1, "requeue")):
        while time.monotonic() < deadline:
            done = steps_of_run(log, restart)
            if done >= warn_at:
                break
            if restart == 1 and port and hold.port is None and not done \
                    and slurm.states([job]) == {job: "PENDING"} and hold.take(port):  # until run 2 has stepped
                notes.append(f"port {port}, run 1's rendezvous port, held by the checker from "
                             f"{time.strftime('%H:%M:%S')} (as another job or a lingering process may hold it)")
            if not slurm.queued([job]):
                notes.append(f"the job ended before its run {restart + 1} reached {warn_at} steps")
                return
            if stall is not None and stall.poll():
                return
            time.sleep(0.1)
        else:
            return
        if action == "warning" and hold is not None:
            port = rendezvous_port(job)
        err = slurm.signal_batch(job) if action == "warning" else slurm.requeue(job)
        notes.append(f"{action} sent to run {restart + 1} at {time.strftime('%H:%M:%S')}"
                     + (f" ({err})" if err else ""))
        if err:
            return


def grade(h, checks: list[Check]) -> tuple[list, list]:
    """The checks' evidence in one procedure (the jobs share one queue), each check's verdict from its evaluator, given
    what it reads as soon as that exists."""
    names = {c.name for c in checks}
    script = h.root / h.target / seams.SEAMS[LAB].folder / "train.sbatch"
    results: dict[str, CheckResult] = {}
    info: list[tuple[str, str]] = []
    byname = {c.name: c for c in checks}

    def verdict(name, *reads):
        c = byname[name]
        results[name] = c.evaluate(c, *reads)

    if "k8s_manifests_valid" in names:
        verdict("k8s_manifests_valid", h)
    slurm_names = names - {"k8s_manifests_valid"}  # without Slurm, checker/cli.py has set them aside (NOT RUN)
    if not slurm_names:
        return [results[c.name] for c in checks], info
    if not script.exists():
        for n in slurm_names:
            results[n] = CheckResult(n, False, message=f"{script.relative_to(h.root)} not found", hint=byname[n].hint)
        return [results[c.name] for c in checks], info

    runs = h.workdir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    env = slurm.client_env({"LAB5_RUNS": str(runs), "LAB5_PYTHON": sys.executable, "COURSE_TARGET": h.target,
                            "PYTHONPATH": str(h.root), "COURSE_DEVICE": h.device})
    if "batch_script_valid" in names:
        verdict("batch_script_valid", script, env)

    needs_jobs = names & {"preempt_resume", "metrics_complete", "scaling_curve"}
    if not needs_jobs:
        return [results[c.name] for c in checks], info
    signal_at = 2 + h.variant % 3  # a hidden variant moves it
    flag = h.run("flag", "flag", dict(signal_at=signal_at), budget_s=60, nproc=2) if "preempt_resume" in names else None
    deadline = time.monotonic() + DEADLINE_S * float(
        os.environ.get("CHECKER_BUDGET_SCALE", "1"))  # a site's slow requeue
    # --chdir: the job starts `python -m` there, which puts that folder first on its path: the graded tree's labs/
    job, said = slurm.sbatch(script, ["--job-name=checker-lab5-preempt", f"--output={runs}/slurm-%j.log",
                                      f"--chdir={h.root}"],
                             {**env, "LAB5_TRAIN_ARGS": PREEMPT_ARGS})
    # submit_sweep calls sbatch, which must reach slurmctld on this machine's network: not from a sandbox's loopback
    sweep = h.run("sweep", "sweep", dict(runs=str(runs), train_args=TRAIN_ARGS, world_sizes=SWEEP), budget_s=30,
                  sandbox=False)
    array = sweep.result.get("array") if not sweep.error() else None
    throttle = slurm.array_throttle(array) if array else None  # read now: the controller forgets it MinJobAge after
    submitted = [j for j in (job, array) if j]
    notes: list[str] = []
    stall = Stall(runs, submitted)  # a job that runs but writes nothing ends the wait (stall.py)
    hold = PortHold()
    try:
        if job:
            h.on_progress("preempted job")
            preempt(job, runs / job / "log.jsonl", deadline, notes,
                    WARN_AT + h.variant % 5, stall, hold)  # a hidden variant moves the step
        h.on_progress("jobs")
        left = slurm.wait_all(submitted, deadline, stop=stall.poll)
    finally:
        slurm.cancel(submitted)  # anything still queued at the deadline: no job outlives the grade
        hold.close()
    records = slurm.jobcomp_records()
    tasks = slurm.array_tasks(array) if array else []
    if stall.why:
        notes.append(stall.why)
    info += [("preemption", "; ".join(notes) or "-"),
             ("jobs", f"preempted {job or '-'}; sweep array {array or '-'}: tasks {', '.join(tasks) or '-'}")]

    ref = _sweep_job(tasks, runs, 2)
    if "preempt_resume" in names:
        verdict("preempt_resume", flag, signal_at, job, said, runs, ref, records, left, notes, stall.why)
    if names & {"metrics_complete", "scaling_curve"}:
        finished = [j for j in ([job] if job else []) + tasks if slurm.finished(j, records)]
        csv_path = runs / "metrics.csv"
        col = h.run("collect", "collect", dict(jobcomp=str(slurm.jobcomp_path()), runs=str(runs),
                                               csv_path=str(csv_path)), budget_s=30)
        if "metrics_complete" in names:
            verdict("metrics_complete", col, csv_path, finished, runs, records, sweep, array, stall.why)
        if "scaling_curve" in names:  # from the CSV the collect run wrote: none, no report run
            rep = None if col.error() else h.run("report", "report", dict(csv_path=str(csv_path),
                                                                          out=str(runs / "report")), budget_s=60)
            verdict("scaling_curve", col, rep, finished, runs, records, (array, throttle))
            info += scaling_info(rep) if rep else []
    return [results[c.name] for c in checks], info


def _sweep_job(tasks, runs, world_size):
    for t in tasks:
        events, _ = read_events(runs / t / "log.jsonl")
        if any(e.get("event") == "start" and e.get("world_size") == world_size for e in events):
            return t
    return None


def scaling_info(rep) -> list[tuple[str, str]]:
    if rep.error():
        return []
    return [(f"sweep {t['world_size']} rank(s)", f"{t['tokens_per_s']:,.0f} tokens/s, efficiency {t['efficiency']:.0%}")
            for t in rep.result.get("table", [])]
