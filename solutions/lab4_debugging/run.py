"""Recreate an incident's conditions, launch the job under torchrun, and keep its log.

    python -m labs.lab4_debugging.run 2              # incident 2 -> runs/lab4/incident2.log
    python -m labs.lab4_debugging.run 2 --budget 20  # give up (and dump every rank's stack) after 20 s

A run that hangs is stopped after its budget: first every rank writes its Python stack to the log
(SIGUSR1 -> faulthandler, what `py-spy dump --pid` shows you on a cluster), then the whole process
group is killed. Nothing is left running. Exit status: 0 when the job completed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .scenarios import INCIDENTS, Scenario, scenario

PACKAGE = __package__  # labs.lab4_debugging (or solutions.lab4_debugging)


def job_command(sc: Scenario, launch: list[str], job: dict | None = None) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *launch, "--max-restarts=0",
            "-m", f"{PACKAGE}.job", "--job", json.dumps(job if job is not None else sc.job)]


def launch_args(sc: Scenario) -> list[str]:
    if sc.incident == 7:  # the incident is in how the job is launched: use incident7's launch_args
        from .incident7 import launch_args as team_args
        return team_args(sc.nproc)
    return ["--standalone", f"--nproc-per-node={sc.nproc}"]


class Launch:
    """One torchrun in its own session, its output teed to a log (prefixed when several run at once)."""

    def __init__(self, argv, env, log, prefix: str = "", kill_on: str | None = None):
        self.log, self.prefix, self.kill_on, self.cued = log, prefix, kill_on, False
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self):
        for raw in self.proc.stdout:
            line = self.prefix + raw.decode(errors="replace")
            self.lines.append(line)
            self.log.write(line)
            self.log.flush()
            sys.stdout.write(line)
            if self.kill_on and self.kill_on in line and not self.cued:
                self.cued = True  # a preemption: SIGKILL, no chance to clean up
                self.kill(signal.SIGKILL)

    def kill(self, sig=signal.SIGKILL):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def py_spy(self) -> None:
        """Where each rank waits, read from outside by py-spy (if installed: `pip install py-spy`; it needs ptrace
        rights, root or ptrace_scope 0): what an on-call engineer runs on a job that has no faulthandler hook. Each
        rank's stack goes into the log after a `# py-spy dump` line; a rank py-spy cannot read says why."""
        exe = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))  # the venv's
        if exe is None:
            return
        from labs.instruments.proctree import descendants

        for pid in descendants(self.proc.pid):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            rank = next((e[5:].decode() for e in env if e.startswith(b"RANK=")), None)
            if rank is None:  # torchrun's agent, not a rank
                continue
            try:
                r = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=15)
                text = r.stdout if r.returncode == 0 else f"py-spy failed: {r.stderr.strip()[:300]}\n"
            except subprocess.TimeoutExpired:
                text = "py-spy timed out\n"
            self.log.write(f"{self.prefix}# py-spy dump --pid {pid} (rank {rank})\n")
            self.log.write("".join(f"{self.prefix}{line}\n" for line in text.splitlines()))
            self.log.flush()

    def wait(self, deadline: float) -> str:
        """'completed', 'failed (exit N)', 'preempted' or 'hung'."""
        try:
            rc = self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.py_spy()
            self.kill(signal.SIGUSR1)  # every rank's faulthandler writes its stack into the log
            time.sleep(1.5)
            self.kill(signal.SIGKILL)
            self.proc.wait()
            self.reader.join(timeout=5)
            return "hung"
        self.kill(signal.SIGKILL)  # the launcher exited: make sure no rank lingers
        self.reader.join(timeout=5)
        return "preempted" if self.cued else ("completed" if rc == 0 else f"failed (exit {rc})")


def _losses(lines: list[str]) -> dict[int, str]:
    return {int(m[1]): m[2] for m in (re.match(r".*\bstep (\d+) loss (\S+)", ln) for ln in lines) if m}


def run(incident: int, variant: int = 0, log_path: Path | None = None, budget_s: float | None = None) -> int:
    sc = scenario(incident, variant)
    log_path = Path(log_path or f"runs/lab4/incident{incident}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **sc.env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    deadline = lambda: time.monotonic() + (budget_s or sc.budget_s)  # noqa: E731
    with open(log_path, "w") as log:
        log.write(f"# incident {incident} (variant {variant}): {json.dumps(sc.job)} env {json.dumps(sc.env)}\n")
        busy = None
        if sc.busy_port:  # another job's rendezvous store already listens on this port
            busy = socket.socket()
            try:
                busy.bind(("127.0.0.1", sc.busy_port))
                busy.listen()
                log.write(f"# another job on this node is listening on port {sc.busy_port}\n")
            except OSError:
                log.write(f"# port {sc.busy_port} is already taken on this machine\n")
        try:
            if sc.kill_after_save:
                return _preempt_and_resume(sc, env, log, deadline)
            jobs = [Launch(job_command(sc, launch_args(sc)), env, log,
                           prefix=f"[job {j}] " if sc.concurrent_jobs > 1 else "")
                    for j in range(sc.concurrent_jobs)]
            end = deadline()
            outcomes = [j.wait(end) for j in jobs]
        finally:
            if busy:
                busy.close()
        summary = ", ".join(f"job {i}: {o}" for i, o in enumerate(outcomes)) if len(outcomes) > 1 else outcomes[0]
        log.write(f"# outcome: {summary}\n")
    print(f"incident {incident}: {summary}. Log: {log_path}")
    return 0 if all(o == "completed" for o in outcomes) else 1


def _preempt_and_resume(sc: Scenario, env, log, deadline) -> int:
    """An uninterrupted run for reference; then a run killed right after its checkpoint; then the resume."""
    ckpt = str((Path(log.name).parent / f"incident{sc.incident}.ckpt.pt").resolve())
    launch = launch_args(sc)
    log.write("# 1/3 the run as it would have gone without the preemption\n")
    ref = Launch(job_command(sc, launch, {**sc.job, "save_at": None}), env, log, prefix="[uninterrupted] ")
    outcomes = [ref.wait(deadline())]
    log.write("# 2/3 the same run, killed (SIGKILL) right after its checkpoint\n")
    first = Launch(job_command(sc, launch, {**sc.job, "ckpt": ckpt}), {**env, "LAB4_WAIT_FOR_KILL": "1"}, log,
                   prefix="[preempted] ", kill_on="checkpoint written")
    outcomes.append(first.wait(deadline()))
    log.write("# 3/3 the requeued job resumes from the checkpoint\n")
    resumed = Launch(job_command(sc, launch, {**sc.job, "ckpt": ckpt, "save_at": None, "resume": True}), env, log,
                     prefix="[resumed] ")
    outcomes.append(resumed.wait(deadline()))
    want, got = _losses(ref.lines), _losses(resumed.lines)
    differ = [s for s in sorted(got) if want.get(s) != got[s]]
    for s in sorted(got):
        log.write(f"step {s}: loss {got[s]} after resume, {want.get(s, '?')} uninterrupted"
                  f"{'  <- differs' if s in differ else ''}\n")
    verdict = ("resumed exactly" if got and not differ
               else f"resume differs from step {differ[0]}" if differ else "no resume")
    log.write(f"# outcome: {', '.join(outcomes)}; {verdict}\n")
    print(f"incident {sc.incident}: {verdict}. Log: {log.name}")
    return 0 if verdict == "resumed exactly" and outcomes == ["completed", "preempted", "completed"] else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("incident", type=int, choices=INCIDENTS)
    ap.add_argument("--variant", type=int, default=0, help="move the fault's rank/step/names (what the checker does)")
    ap.add_argument("--log", type=Path, default=None, help="default: runs/lab4/incidentN.log")
    ap.add_argument("--budget", type=float, default=None, help="seconds before a hung job is stopped")
    a = ap.parse_args(argv)
    return run(a.incident, a.variant, a.log, a.budget)


if __name__ == "__main__":
    raise SystemExit(main())
