"""The checker's side of Slurm: is one reachable, submit, signal, requeue, wait, read the job records.

Plain subprocess calls to the Slurm client commands (sbatch, squeue, scancel, scontrol, sinfo): the
same commands a learner types, so a check's message can quote them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

HINT_START = "start Slurm: `make slurm-up` (as root; checker/slurm_local.sh), or grade on the workshop's cluster"


def _run(cmd: list[str], timeout: float = 15, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def unavailable() -> str | None:
    """None when a controller answers and a node can take jobs; else why not, in one line."""
    if not shutil.which("sbatch") or not shutil.which("sinfo"):
        return "the Slurm client commands (sbatch, sinfo) are not installed"
    conf = os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")
    if not Path(conf).is_file():  # the clients would retry for 60 s before saying so
        return f"no Slurm configuration at {conf}"
    try:
        r = _run(["sinfo", "-h", "-o", "%t"], timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 20 s: is slurmctld running?"
    if r.returncode != 0:
        return f"sinfo failed: {(r.stderr or r.stdout).strip().splitlines()[-1:] or ['no output']}"
    states = r.stdout.split()
    if not any(s.rstrip("*~#$@").startswith(("idle", "mix", "alloc", "comp")) for s in states):
        return f"no node can run jobs (node states: {', '.join(states) or 'none'})"
    return None


def sbatch(script: Path, args: list[str], env: dict) -> tuple[str | None, str]:
    """(job id, "") or (None, sbatch's complaint)."""
    r = _run(["sbatch", "--parsable", *args, str(script)], env=env)
    if r.returncode != 0:
        return None, (r.stderr or r.stdout).strip()
    return r.stdout.strip().split(";")[0], ""


def test_only(script: Path, env: dict, args: tuple[str, ...] = ()) -> tuple[bool, str]:
    """`sbatch --test-only`: Slurm parses the script's options and says when it would start, submitting nothing.
    `args` go before the script, where they override its #SBATCH lines (e.g. --nodes=1 on a one-node Slurm)."""
    r = _run(["sbatch", "--test-only", *args, str(script)], env=env)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT"}


def queued(job_ids: list[str]) -> list[str]:
    """Which of these jobs (an array id covers all its tasks) are still pending or running, as squeue
    names them: "7", or "6_1" for task 1 of array 6 (a pending task has no job id of its own yet)."""
    if not job_ids:
        return []
    r = _run(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(job_ids)])
    return [p[0] for p in (line.split() for line in r.stdout.splitlines()) if len(p) == 2 and p[1] in ACTIVE]


def states(job_ids: list[str]) -> dict[str, str] | None:
    """Own job id -> state, for these jobs (an array id stands for its tasks, each under its own id once it has
    started) still pending or running; None when squeue did not answer."""
    if not job_ids:
        return {}
    try:
        r = _run(["squeue", "-h", "-r", "-o", "%A %T", "-j", ",".join(job_ids)])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return {} if "Invalid job id" in r.stderr else None
    return {p[0]: p[1] for p in (line.split() for line in r.stdout.splitlines()) if len(p) == 2 and p[1] in ACTIVE}


def array_states(array_id: str) -> dict[int, str] | None:
    """Task index -> state, for the tasks of an array still pending or running (`squeue -r`: one line per task,
    "6_3 RUNNING"); {} once none is; None when squeue did not answer (a busy controller: ask again, never take
    it for "all finished")."""
    try:
        r = _run(["squeue", "-h", "-r", "-o", "%i %T", "-j", array_id])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:  # an array that has left the controller's memory (MinJobAge) is an invalid id
        return {} if "Invalid job id" in r.stderr else None
    return parse_array_states(r.stdout)


def parse_array_states(text: str) -> dict[int, str]:
    out = {}
    for line in text.splitlines():
        job, _, state = line.strip().partition(" ")
        _, _, index = job.partition("_")
        if index.isdigit() and state.strip() in ACTIVE:
            out[int(index)] = state.strip()
    return out


def array_records(array_id: str, job_name: str, records: list[dict]) -> dict[int, dict]:
    """Task index -> the last jobcomp record of each task of this array (the job name tells it from an array of
    the same id before a `slurmctld -c` restart numbered jobs from 1 again)."""
    out = {}
    for rec in records:
        if rec.get("ArrayJobId") == array_id and rec.get("Name") == job_name and rec.get("ArrayTaskId", "").isdigit():
            out[int(rec["ArrayTaskId"])] = rec
    return out


def array_tasks(array_id: str) -> list[str]:
    """The own job ids of a finished array's tasks, from the jobcomp records."""
    return sorted({rec["JobId"] for rec in jobcomp_records() if rec.get("ArrayJobId") == array_id}, key=int)


def array_throttle(array_id: str) -> int | None:
    """How many of the array's tasks Slurm may run at once: `--array=0-3%1` gives 1, `--array=0-3` 0 (no limit:
    `scontrol show job` then prints no ArrayTaskThrottle); None when scontrol no longer knows the array."""
    try:
        r = _run(["scontrol", "-o", "show", "job", array_id])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0 or "ArrayJobId=" not in r.stdout:
        return None
    for item in r.stdout.split():
        key, _, value = item.partition("=")
        if key == "ArrayTaskThrottle" and value.isdigit():
            return int(value)
    return 0


def signal_batch(job_id: str, sig: str = "USR1") -> str:
    """What `#SBATCH --signal=B:USR1@90` does ahead of a time limit or preemption: signal the batch shell only."""
    r = _run(["scancel", "--batch", f"--signal={sig}", job_id])
    return "" if r.returncode == 0 else (r.stderr or r.stdout).strip()


def requeue(job_id: str) -> str:
    """Slurm's own requeue: SIGTERM to every process of the job, SIGKILL after KillWait, then pending again."""
    r = _run(["scontrol", "requeue", job_id])
    return "" if r.returncode == 0 else (r.stderr or r.stdout).strip()


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        _run(["scancel", *job_ids])


def jobcomp_path() -> Path | None:
    try:
        r = _run(["scontrol", "show", "config"])
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "JobCompLoc" and value.strip():
            return Path(value.strip())
    return None


def jobcomp_records(path: Path | None = None) -> list[dict]:
    """Every line of the jobcomp/filetxt file as a dict (the checker's own parse, not the learner's)."""
    path = path or jobcomp_path()
    if path is None or not Path(path).exists():
        return []
    return parse_records(Path(path).read_text(errors="replace"))


def parse_records(text: str) -> list[dict]:
    """'JobId=4 JobState=COMPLETED ...' lines -> dicts (an empty value is 'Key=')."""
    return [dict(item.partition("=")[::2] for item in line.split()) for line in text.splitlines() if line.strip()]


def finished(job_id: str, records: list[dict]) -> list[dict]:
    """The job's jobcomp records, oldest first, if its last one is final (not a requeue's PENDING); else []."""
    mine = [r for r in records if r.get("JobId") == job_id]
    return mine if mine and mine[-1].get("JobState") != "PENDING" else []


def wait_all(job_ids: list[str], deadline: float, poll_s: float = 0.5, stop=None) -> list[str]:
    """Wait until none of the jobs is queued or running, the deadline passes, or `stop()` says why to give up
    (a stalled job); return those still there."""
    left = queued(job_ids)
    while left and time.monotonic() < deadline and not (stop and stop()):
        time.sleep(poll_s)
        left = queued(job_ids)
    return left


def client_env(extra: dict) -> dict:
    env = dict(os.environ)
    env.update(extra)
    return env
