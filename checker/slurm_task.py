"""One task of a class's grade on Slurm, on its compute node: grade its learners, one after another, into the
folder the submitting command collects from (checker/batch_slurm.py writes the array script that runs this).

    python -m checker.slurm_task REPORT_DIR/slurm/manifest.json [INDEX]    # INDEX: $SLURM_ARRAY_TASK_ID

Each learner is graded as the local batch grades them (batch.grade_learner: sandboxed, the manifest's hidden
variant, the per-learner budget) and their report is written whole to slurm/learners/NAME.json. A learner whose
report is there already is skipped: that is how a requeued task (node failure, preemption, `scontrol requeue`)
grades only what it had not finished. While a learner is graded, slurm/learners/NAME.grading says by which job
and where, for the collector to name a task that ended in the middle. Signals:
- SIGTERM (Slurm requeues or cancels the task, or its time limit is over): the grade in progress is stopped and
  nothing is written for that learner: a requeued task grades them again, a cancelled one leaves them missing;
- SIGUSR1 (`#SBATCH --signal=B:USR1@90`: the time limit is 90 s away): the learner in progress gets failed rows
  saying so, and the task ends; the learners of its group not reached stay missing (`--rerun-missing`).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from checker import batch, sandbox


class Stopped(BaseException):
    """A signal from Slurm: raised in the middle of a grade (BaseException: no `except Exception` swallows it)."""


def _raise(signum, frame):
    for s in (signal.SIGTERM, signal.SIGUSR1):  # one stop: a second signal must not interrupt the stopping
        signal.signal(s, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def write_json(path: Path, data: dict) -> None:
    """Whole or not at all: the collector on another machine never reads half a report."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def report_path(slurm_dir: Path, name: str) -> Path:
    return slurm_dir / "learners" / f"{name}.json"


def marker_path(slurm_dir: Path, name: str) -> Path:
    return slurm_dir / "learners" / f"{name}.grading"


def incomplete(lab: str, reason: str, only, cause: str, status: str = "fail", hint: str | None = None) -> dict:
    """A learner's entry when their grade did not finish: every check with the reason; `incomplete` marks it
    for --rerun-missing."""
    rep = batch.failed(lab, reason, only, cause=cause)
    for c in rep["checks"]:
        c["status"] = status
        if hint is not None:
            c["hint"] = hint
    rep["incomplete"] = reason
    return rep


def grade_group(m: dict, slurm_dir: Path, index: int) -> int:
    lab, only = m["lab"], m["only"]
    host = socket.gethostname()
    if m["gpus_per_learner"]:  # the GPUs Slurm allocated to this task (--gres), shared out by the learner's checker
        gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    else:  # none allocated: none used, whatever GPUs the node has (another job's, perhaps)
        gpus, os.environ["CUDA_VISIBLE_DEVICES"] = None, ""
    digest = sandbox.course_digest()
    differ = sandbox.changed_files(m["digest"], digest)
    no_box = None if m["no_sandbox"] else sandbox.why_not()
    for name in m["groups"][index]:
        out, marker = report_path(slurm_dir, name), marker_path(slurm_dir, name)
        if out.exists():  # graded before this task was requeued
            continue
        sub = Path(m["submissions"]) / name
        if differ:
            rep = incomplete(lab, f"not graded: the course's files on node {host} differ from those the batch was "
                                  f"submitted with ({', '.join(differ[:3])}): every node must see the same checkout",
                             only, cause="error")
        elif no_box:
            rep = incomplete(lab, f"not graded: node {host} cannot sandbox learner code ({no_box}); install "
                                  f"bubblewrap there (`{sandbox.INSTALL}`) or grade with --no-sandbox", only, "error")
        else:
            # the array's id from Slurm: the manifest gets it only after sbatch returns, and a task may start first
            write_json(marker, {"job": os.environ.get("SLURM_JOB_ID", ""),
                                "array": os.environ.get("SLURM_ARRAY_JOB_ID", m["array"]), "task": index,
                                "node": host, "since": time.time()})
            try:
                with tempfile.TemporaryDirectory(prefix=f"checker-batch-{lab}-") as tmp:
                    rep, _ = batch.grade_learner(lab, sub, m["variant"], Path(tmp), digest, only, m["no_sandbox"],
                                                 gpus, m["device"], m["budget"], m["no_hints"])
            except Stopped as e:
                if str(e) != "SIGUSR1":
                    print(f"{name}: stopped by {e} (requeued or cancelled); nothing written", flush=True)
                    return 128 + signal.SIGTERM
                rep = incomplete(lab, f"hung: its Slurm task reached its time limit ({m['time_min']} min) while "
                                      "grading it, and the grade was stopped", only, cause="hang")
                write_json(out, batch.with_hints(lab, sub, rep, m["no_hints"]))
                marker.unlink(missing_ok=True)
                print(f"{name}: stopped 90 s before the task's time limit; failed rows written", flush=True)
                return 0
        write_json(out, batch.with_hints(lab, sub, rep, m["no_hints"]))
        marker.unlink(missing_ok=True)
        print(batch.learner_line(name, rep, m["no_hints"]), flush=True)
    return 0


def main(argv: list[str]) -> int:
    for s in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(s, _raise)
    manifest = Path(argv[0]).resolve()
    index = int(argv[1]) if len(argv) > 1 else int(os.environ["SLURM_ARRAY_TASK_ID"])
    try:
        return grade_group(json.loads(manifest.read_text()), manifest.parent, index)
    except Stopped as e:  # between two learners
        print(f"stopped by {e} between learners", flush=True)
        return 0 if str(e) == "SIGUSR1" else 128 + signal.SIGTERM


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
