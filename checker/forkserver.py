"""The one way a graded run starts: a server per grade that imported torch once and starts each run for the harness.

`import torch` with torch.distributed costs ~4 s of CPU on these cores (2.5 s for torch alone), and a
grade starts 7-20 runs of 1-4 ranks: on 2 cores that was about 40% of lab 1's grade. So the harness starts
this server when a grade begins (sandboxed: inside the grade's bwrap, checker/sandbox.py); every run, the
reference's and the learner's, whatever its device, is a child of it:

    harness --{"id", "args", "argv", "nproc", "env", "cwd", "log"}--> server
    server: G = fork()  --{"id", "pid", "forked"}--> harness   ...later, when G ends: {"id", "exit": status}
    G: setsid(), stdio -> the run's log, chdir, environ := the run's, then checker.worker's main()
       (nproc given: G forks the ranks, each with torchrun's variables, and supervises them as
       checker/spawn.py does)

A run that is a command rather than a worker task (`argv` only: torchrun where the launch is graded, lab 4's
job script, lab 8's nodes), and any run where forking is not safe (below), is G = that command, started
fresh (subprocess: fork + exec), the same run with its own imports. Either way G is the server's child in its
own session: the harness signals its session and its descendants, and learns its exit status from the server.

What makes the fork safe and the run faithful:
  - the server imports only third-party modules (never the course's or the learner's code: a SyntaxError in
    a learner's file must fail that run, not the server), runs no torch op and starts no thread. Before each
    fork it checks it still has one thread and has initialised no GPU driver (importing torch does not: a
    forked run on a GPU node initialises CUDA itself, as a fresh process does); otherwise, and on macOS, where
    the system frameworks forbid fork without exec, runs start fresh;
  - a request that arrives while the server is still importing is served between two imports: the first
    run of a grade does not wait for the whole preload, and brings up the rest itself;
  - the server's environment is the runs' own (libgomp reads OMP_NUM_THREADS when torch loads it);
    a worker run with extra environment is started fresh, unless the harness says only the run's code reads it;
  - Python reseeds `random` in a forked child; torch's default generator is untouched, as fresh;
  - the server wakes when a run ends (a SIGCHLD handler writing to a pipe, so the harness hears of the exit at
    once, not at the next 50 ms poll); G undoes both before the run starts: SIGCHLD as a fresh process has it;
  - a run ends like any Python program (SystemExit: atexit, non-daemon threads are joined).
The server is a child subreaper (Linux): a process that a run double-forks into a session of its own is
re-parented to the server, not to init, so the harness finds it among the server's children and ends it
(Harness._sweep). CHECKER_FORKSERVER=0 starts every run fresh (no preload). The harness's side is checker/launch.py.
"""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import signal
import subprocess
import sys

from checker import spawn  # standard library only: it adds nothing to what a fork carries

PRELOAD = ("numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch.distributed.fsdp",
           "torch.distributed.checkpoint", "torch.distributed.tensor", "torch.distributed.pipelining")


# ---- the server ---------------------------------------------------------------------------------

GPU_DEVICE_FILES = ("/dev/nvidia", "/dev/kfd", "/dev/dri")  # opened by a GPU driver's initialisation


def fork_safe() -> bool:
    """May this process fork a run that goes on to run Python? One thread (a fork copies a lock another
    thread holds, never released), no GPU driver initialised (torch's context, or a device query that opened
    the device files: a child cannot use a driver its parent started), Linux."""
    if os.environ.get("CHECKER_FORKSERVER") == "0" or not sys.platform.startswith("linux"):
        return False
    if len(os.listdir("/proc/self/task")) != 1:
        return False
    torch = sys.modules.get("torch")
    return (torch is None or not torch.cuda.is_initialized()) and not _opened(GPU_DEVICE_FILES)


def _opened(prefixes: tuple[str, ...]) -> bool:
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(prefixes):
                return True
        except OSError:
            continue
    return False


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


def _wake_on_child_exit() -> tuple[int, ...]:
    """A pipe (read end, write end) that SIGCHLD writes to (signal.set_wakeup_fd), so the server's select wakes
    when a run ends instead of at its next timeout. () where that cannot be set up: the timeout finds the exit."""
    try:
        r, w = os.pipe()
        os.set_blocking(r, False), os.set_blocking(w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler (the default ignores it), so the fd gets a byte
        signal.set_wakeup_fd(w)
        return r, w
    except (OSError, ValueError):
        return ()


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _become_run(req: dict, wake: tuple[int, ...]) -> None:
    """In G: become the run, then exit as a Python program does (SystemExit unwinds to the top)."""
    signal.set_wakeup_fd(-1)  # the server's wake-up is its own: a run starts with SIGCHLD as a fresh process has it
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wake:
        os.close(fd)
    os.setsid()
    null, log = os.open(os.devnull, os.O_RDONLY), os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(null, 0), os.dup2(log, 1), os.dup2(log, 2)  # the server's pipes to the harness are out of reach
    os.close(null), os.close(log)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    if req["nproc"] is None:
        raise SystemExit(_worker(req["args"]))
    port = spawn.free_port()
    ranks = [_fork_rank(r, req["nproc"], port, req["args"]) for r in range(req["nproc"])]
    raise SystemExit(spawn.supervise(ranks))


class _Server:
    def __init__(self):
        self.runs: dict[int, str] = {}  # G's pid -> the request's id
        self.fresh: dict[int, subprocess.Popen] = {}  # runs started fresh, kept until they end
        self.buf = b""
        self.wake = _wake_on_child_exit()  # its read end is readable when a child ends: the exit is reported at once

    @staticmethod
    def send(msg: dict) -> None:
        os.write(1, json.dumps(msg).encode() + b"\n")  # < PIPE_BUF: one write, never interleaved

    def pump(self, timeout_s: float) -> bool:
        """Start the runs asked for, report the ones that ended. False at end of input (the harness closed)."""
        more = True
        ready = select.select([0, *self.wake[:1]], [], [], timeout_s)[0]
        if self.wake and self.wake[0] in ready:
            _drain(self.wake[0])
        if 0 in ready:
            chunk = os.read(0, 1 << 16)
            more = bool(chunk)
            *lines, self.buf = (self.buf + chunk).split(b"\n")
            for line in filter(bytes.strip, lines):
                self.start(json.loads(line))
        self.reap()
        return more

    def start(self, req: dict) -> None:
        forked = req.get("args") is not None and fork_safe()
        try:
            if forked:
                pid = os.fork()
                if pid == 0:
                    _become_run(req, self.wake)  # never returns: raises SystemExit in G
            else:
                with open(req["log"], "ab") as log:
                    p = subprocess.Popen(req["argv"], cwd=req["cwd"], env=req["env"], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                pid, self.fresh[p.pid] = p.pid, p
        except OSError as e:
            self.send({"id": req["id"], "error": f"{type(e).__name__}: {e}"})
            return
        self.runs[pid] = req["id"]
        self.send({"id": req["id"], "pid": pid, "forked": forked})

    def reap(self) -> None:
        """Wait for every child that ended: runs (reported) and processes runs left behind (re-parented here)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            if (p := self.fresh.pop(pid, None)) is not None:
                p.returncode = code  # so subprocess never waits for this pid again
            if pid in self.runs:
                self.send({"id": self.runs.pop(pid), "exit": code})


def serve(preload: bool) -> int:
    become_subreaper()
    server = _Server()
    server.send({"hello": os.getpid()})
    if preload and fork_safe():
        for name in PRELOAD:
            importlib.import_module(name)
            if not server.pump(0.0):  # what was asked for meanwhile starts now, with what is imported so far
                return 0
    while server.pump(0.05):
        pass
    return 0


def become_subreaper() -> bool:
    """Orphans of this process's runs get re-parented to it instead of init, so cleanup can find them (Linux;
    elsewhere False). The server and the checker both are one."""
    if sys.platform.startswith("linux"):
        try:
            return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            pass
    return False


class Forked:
    """One of G's own children by pid (a forked rank): Popen's poll/wait/send_signal/returncode."""

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


if __name__ == "__main__":
    code = serve(preload="--no-preload" not in sys.argv[1:])
    # Nothing is left to flush (replies go out with os.write), and a normal exit would tear down torch's
    # modules first: about 1 s per grade on 2 cores, for a process whose runs are over.
    os._exit(code)
