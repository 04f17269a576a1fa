# GENERATED from solutions/lab5_scheduler/jobmetrics.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Join what the scheduler saw with what the training measured: one CSV row per job.

The scheduler knows when a job was submitted, waited, started, ended, how often it ran and how it
finished; the training knows its tokens/s and losses. Neither alone answers "what did this sweep
cost and what did it buy". Slurm's job-completion plugin (JobCompType=jobcomp/filetxt) writes one
line of key=value pairs each time a job leaves the node: a requeued job leaves one line per run
(JobState=PENDING for a run that ended in a requeue, then the final state), and each requeue
resets SubmitTime. What a job's queue wait and run time are, given those lines, is job_row's
question (the README works one run through).

    python -m labs.lab5_scheduler.jobmetrics --jobcomp /var/log/slurm/jobcomp.txt --runs runs/lab5
        --csv runs/lab5/metrics.csv
"""
from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
from datetime import datetime
from pathlib import Path

from labs.common.steplog import read_log  # torch-free: collecting metrics loads no model code

COLUMNS = ["job_id", "array_job_id", "array_task_id", "world_size", "state", "runs", "queue_wait_s",
           "elapsed_s", "steps", "tokens_per_s", "final_loss"]


def jobcomp_path() -> Path:
    """Where this cluster's jobcomp/filetxt writes (JobCompLoc in `scontrol show config`)."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "JobCompLoc":
            return Path(value.strip())
    raise RuntimeError("JobCompLoc not in `scontrol show config`: is JobCompType=jobcomp/filetxt set?")


def parse_jobcomp(text: str) -> list[dict]:
    """One dict per line of a jobcomp/filetxt file: 'JobId=4 JobState=COMPLETED ...' -> {'JobId': '4', ...}.
    Values never contain spaces in the fields we use (an empty value is 'Key=')."""
    raise NotImplementedError("TODO(lab5): One dict per non-empty line, in file order, mapping every key of the line "
                              "to its value, both strings exactly as written: a value may itself contain '=' "
                              "(Tres=cpu=2,mem=4G,node=1), and an empty one (ReservationName=) is ''. Blank lines give "
                              "nothing. (hints: checker hint lab5 jobmetrics.parse_jobcomp)")


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def tokens_per_s(log: list[dict]) -> float | None:
    """The median over steps of tokens/step_s: robust to the first (warm-up) steps and to the
    steps a resumed run repeats; computed from the per-step records, not the meter's running mean."""
    rates = [r["tokens"] / r["step_s"] for r in log if r.get("step_s")]
    return statistics.median(rates) if rates else None


def job_row(job_id: str, records: list[dict], log: list[dict]) -> dict:
    """Everything we report about one job, from its jobcomp records (oldest first) and its step log."""
    raise NotImplementedError("TODO(lab5): A row with every COLUMNS key, describing the whole job over all its runs: "
                              "how it finally ended, how many times it ran, the seconds it spent waiting in the queue "
                              "and the seconds it spent running (the checker compares both with its own reading of the "
                              "jobcomp lines, within 1 s), and its array ids; from the log's step records (those with "
                              "a loss): world size, last step, final loss and tokens_per_s's rate; '' (steps: 0) when "
                              "the log holds no step. (hints: checker hint lab5 jobmetrics.job_row)")


def collect(jobcomp: str | Path, runs: str | Path) -> list[dict]:
    """A row for every job that has a folder under `runs` (train.sbatch names them by job id) and a
    finished record in the jobcomp file. Jobs still queued or running are left out."""
    by_job: dict[str, list[dict]] = {}
    for r in parse_jobcomp(Path(jobcomp).read_text()):
        by_job.setdefault(r["JobId"], []).append(r)
    rows = []
    for folder in sorted(p for p in Path(runs).iterdir() if p.is_dir() and p.name.isdigit()):
        records = by_job.get(folder.name)
        if not records or records[-1]["JobState"] == "PENDING":  # never ran, or requeued and not back yet
            continue
        log = read_log(folder / "log.jsonl") if (folder / "log.jsonl").exists() else []
        rows.append(job_row(folder.name, records, log))
    return sorted(rows, key=lambda r: int(r["job_id"]))


def write_csv(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobcomp", default=None, help="default: JobCompLoc from `scontrol show config`")
    ap.add_argument("--runs", default="runs/lab5")
    ap.add_argument("--csv", default="runs/lab5/metrics.csv")
    args = ap.parse_args(argv)
    rows = collect(args.jobcomp or jobcomp_path(), args.runs)
    print(f"{len(rows)} jobs -> {write_csv(rows, args.csv)}")


if __name__ == "__main__":
    main()
