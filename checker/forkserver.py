"""A fork server for graded runs on CPU: torch is imported once per grade, not once per process.

`import torch` with torch.distributed costs ~4 s of CPU on these cores (2.5 s for torch alone), and a
grade starts 7-20 runs of 1-4 ranks: on 2 cores that was about 40% of lab 1's grade. So the harness
starts this server once, it imports torch and waits; each run is a fork of it that already has torch.

    harness --(request: worker args, nproc, env, cwd, log)--> server: fork C; C forks G and exits
    G: setsid(), stdio -> the run's log, chdir, environ := the run's, then checker.worker's main()
       (nproc given: G forks the ranks, each with torchrun's variables, and supervises them as
       checker/spawn.py does)

C exits at once, so G is re-parented to the nearest child subreaper: the checker (harness.py makes
itself one). G is then the checker's own child in its own session, exactly like a run started with
subprocess.Popen(start_new_session=True): waitpid, killpg and the orphan sweep work unchanged.

What makes the fork safe and the run faithful:
  - the server imports only third-party modules (never the course's or the learner's code: a
    SyntaxError in a learner's file must fail that run, not the server), runs no torch op and
    starts no thread; it refuses to serve if importing left more than one thread;
  - it never touches a GPU, and the harness uses it only where the run's device is the CPU;
  - the server's environment is the runs' own (libgomp reads OMP_NUM_THREADS when torch loads it);
    a run with extra environment, or one launched by another program (torchrun, lab 4's jobs),
    is started with Popen instead;
  - Python reseeds `random` in a forked child; torch's default generator is untouched, as fresh;
  - a run ends like any Python program (SystemExit: atexit, non-daemon threads are joined).
CHECKER_FORKSERVER=0 turns it off.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from checker import spawn  # standard library only: it adds nothing to what a fork carries

PRELOAD = ("numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch.distributed.fsdp",
           "torch.distributed.checkpoint", "torch.distributed.tensor", "torch.distributed.pipelining")
READY_TIMEOUT_S = 120.0  # importing torch on a loaded laptop


# ---- the server ---------------------------------------------------------------------------------

def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _fork_rank(rank: int, nproc: int, port: int, args: list[str]) -> "Forked":
    pid = os.fork()
    if pid:
        return Forked(pid)
    os.environ.update(spawn.rank_env(rank, nproc, port))
    raise SystemExit(_worker(args))


def _worker(args: list[str]) -> int:
    from checker import worker
    sys.argv = [worker.__file__, *args]
    return worker.main(args)


def _become_run(req: dict) -> None:
    """In G: become the run, then exit as a Python program does (SystemExit unwinds to the top)."""
    os.setsid()
    null, log = os.open(os.devnull, os.O_RDONLY), os.open(req["log"], os.O_WRONLY | os.O_APPEND)
    os.dup2(null, 0), os.dup2(log, 1), os.dup2(log, 2)
    os.close(null), os.close(log)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    if req["nproc"] is None:
        raise SystemExit(_worker(req["args"]))
    port = spawn.free_port()
    ranks = [_fork_rank(r, req["nproc"], port, req["args"]) for r in range(req["nproc"])]
    raise SystemExit(spawn.supervise(ranks))


def serve() -> int:
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    if _threads() != 1:  # forking a threaded process can copy a lock that some thread holds
        print(f"forkserver: {_threads()} threads after imports; not serving", file=sys.stderr)
        return 2
    os.write(1, b"ready\n")
    for line in sys.stdin.buffer:
        req = json.loads(line)
        r, w = os.pipe()
        c = os.fork()
        if c == 0:  # C: fork G, tell the server its pid, leave
            os.close(r)
            g = os.fork()
            if g == 0:
                os.close(w)
                _become_run(req)  # never returns: raises SystemExit in G
            os.write(w, str(g).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            pid = f.read()
        os.waitpid(c, 0)  # C is gone, so G's parent is now the subreaper
        os.write(1, json.dumps({"pid": int(pid)} if pid else {"error": "fork failed"}).encode() + b"\n")
    return 0


# ---- the harness's side -------------------------------------------------------------------------

class Forked:
    """A child that was not started by subprocess: Popen's poll/wait/send_signal/returncode for its pid."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def _reap(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped by someone else: its status is lost
                self.returncode = 255
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reap(os.WNOHANG)

    def wait(self) -> int:
        return self._reap(0)

    def send_signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass


def usable(device: str, subreaper: bool) -> str | None:
    """None if runs may be forked here, else why not. `subreaper`: the checker is a child subreaper
    (harness.become_subreaper()), without which a forked run would be re-parented to init, not to it."""
    if os.environ.get("CHECKER_FORKSERVER", "1") == "0":
        return "CHECKER_FORKSERVER=0"
    if device not in ("cpu", "auto") or (device == "auto" and any(
            os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg"))):
        return "the runs' device may be a GPU"
    return None if subreaper else "the checker is not a child subreaper"


class ForkServer:
    """The harness's handle. Constructing it starts the server and returns at once (the imports overlap
    the first run); launch() forks a run, or returns None (the harness then uses Popen) if the server can't."""

    def __init__(self, env: dict, cwd: Path, log_path: Path):
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "checker.forkserver"], cwd=cwd, env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True)
        self.ready: bool | None = None
        self.why_not = ""

    def _line(self, timeout_s: float) -> bytes:
        fd = self.proc.stdout.fileno()
        if not select.select([fd], [], [], timeout_s)[0]:
            return b""
        return self.proc.stdout.readline()

    def launch(self, args: list[str], nproc: int | None, env: dict, cwd: Path, log: Path,
               wait: bool = True) -> Forked | None:
        """wait=False: if the server is still importing, return None at once (the caller uses Popen)."""
        if self.ready is None:
            line = self._line(READY_TIMEOUT_S if wait else 0.0)
            if not line and not wait and self.proc.poll() is None:
                return None
            self.ready = line == b"ready\n"
            if not self.ready:
                self.why_not = "did not start"
        if not self.ready or self.proc.poll() is not None:
            return None
        try:
            self.proc.stdin.write(json.dumps({"args": args, "nproc": nproc, "env": env, "cwd": str(cwd),
                                              "log": str(log)}).encode() + b"\n")
            self.proc.stdin.flush()
            reply = json.loads(self._line(30.0) or b"{}")
        except (OSError, ValueError):
            reply = {}
        if "pid" not in reply:
            self.ready, self.why_not = False, reply.get("error", "stopped answering")
            return None
        from labs.instruments import proctree  # here, in the checker: the server itself imports nothing of labs

        if proctree.parent(reply["pid"]) != os.getpid():  # not ours to wait for (even as a zombie): don't use it
            try:
                os.killpg(reply["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.ready, self.why_not = False, "its runs are not the checker's children"
            return None
        return Forked(reply["pid"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the server's loop ends at end of input
            deadline = time.monotonic() + 5
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.proc.poll() is None:
                self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


if __name__ == "__main__":
    sys.exit(serve())
