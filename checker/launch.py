"""The harness's side of the run server (checker/forkserver.py): start it (in the grade's sandbox or not), ask it
for runs, learn when they end.

    srv = ForkServer(env, workdir, log, wrap=sandbox_wrapper)   # returns once the server said hello
    run = srv.launch(worker_args or None, argv, nproc, env, cwd, log)   # a Launched: pid, poll(), wait()

A sandboxed server's pids are its PID namespace's: the harness finds its own for each through /proc/PID/status
(NSpid), so that it can signal a run's session and descendants as it does outside.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from labs.instruments import proctree

HELLO_TIMEOUT_S = 60.0  # a Python start (and a bwrap) on a loaded laptop
REPLY_TIMEOUT_S = 120.0  # a request that arrived during `import torch` waits for it to finish
EXIT_TIMEOUT_S = 30.0  # a SIGKILLed run's exit, reported by the server


class Launched:
    """A run the server started: Popen's pid (the harness's view of it; None if it ended before it was
    seen), poll(), wait() and returncode, the exit status coming from the server."""

    def __init__(self, server: "ForkServer", rid: str, pid: int | None, forked: bool):
        self.server, self.rid, self.pid, self.forked = server, rid, pid, forked
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            gone = not self.server.alive()  # before reading: what it said before it died is still in the pipe
            self.server.pump(0.0)
            self.returncode = self.server.exits.pop(self.rid, None)
            if self.returncode is None and gone:
                self.returncode = 255  # no one left to report it; the harness then ends what is left of the run
        return self.returncode

    def wait(self) -> int:
        deadline = time.monotonic() + EXIT_TIMEOUT_S  # poll() itself gives up once the server is gone
        while self.poll() is None and time.monotonic() < deadline:
            self.server.pump(0.05)
        if self.returncode is None:
            self.returncode = 255  # no exit status reported in time
        return self.returncode


class ServerGone(RuntimeError):
    pass


class ForkServer:
    """The harness's handle on one server. `wrap` puts the server's command in a sandbox (bwrap): the
    server's pids are then the sandbox's, and the harness finds its own for them (NSpid in /proc)."""

    def __init__(self, env: dict, cwd: Path, log_path: Path, wrap: Callable[[list[str]], list[str]] | None = None,
                 preload: bool = True):
        argv = [sys.executable, "-m", "checker.forkserver", *([] if preload else ["--no-preload"])]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(wrap(argv) if wrap else argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        self.sandboxed = wrap is not None
        self.exits: dict[str, int] = {}  # request id -> exit status, for runs not yet polled
        self._buf, self._ids = b"", 0
        hello = self._next(lambda m: "hello" in m, HELLO_TIMEOUT_S)
        if hello is None:
            raise ServerGone(f"the run server did not start: {self._log_tail(log_path)}")
        # The server and what wraps it (bwrap's processes), before any run exists: never swept as a run's leftover.
        self.own = {self.proc.pid, *proctree.descendants(self.proc.pid)}
        self.pid = self._host_pid(hello["hello"], among=self.own)  # None: not found, and no sweep (Harness._sweep)

    @staticmethod
    def _log_tail(path: Path) -> str:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-3:]) or "no output"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _host_pid(self, pid: int, among=None) -> int | None:
        """The harness's pid for a pid the server reported (the same one unless the server is sandboxed), found
        `among` the given pids or the server's descendants."""
        if not self.sandboxed:
            return pid
        for p in among if among is not None else proctree.descendants(self.pid or self.proc.pid):
            try:
                for line in open(f"/proc/{p}/status"):
                    if line.startswith("NSpid:"):
                        if int(line.split()[-1]) == pid:
                            return p
                        break
            except (OSError, ValueError):
                continue
        return None

    def fileno(self) -> int:
        """The server's replies (select() waits on a ForkServer itself)."""
        return self.proc.stdout.fileno()

    def _lines(self, timeout_s: float) -> list[dict]:
        fd = self.fileno()
        if not select.select([fd], [], [], timeout_s)[0]:
            return []
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return []
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        return [json.loads(ln) for ln in lines if ln.strip()]

    def pump(self, timeout_s: float) -> list[dict]:
        """Read what the server said; exits are kept in self.exits, the rest returned."""
        other = []
        for msg in self._lines(timeout_s):
            if "exit" in msg:
                self.exits[msg["id"]] = msg["exit"]
            else:
                other.append(msg)
        return other

    def _next(self, want, timeout_s: float) -> dict | None:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            found = [m for m in self.pump(min(left, 0.5)) if want(m)]
            if found:
                return found[0]
            if not self.alive():
                return None
        return None

    def launch(self, args: list[str] | None, argv: list[str], nproc: int | None, env: dict, cwd: Path,
               log: Path) -> Launched:
        """Start a run: a fork running checker.worker with `args` where it may, else `argv` started fresh."""
        self._ids += 1
        rid = str(self._ids)
        try:
            self.proc.stdin.write(json.dumps({"id": rid, "args": args, "argv": argv, "nproc": nproc, "env": env,
                                              "cwd": str(cwd), "log": str(log)}).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise ServerGone(f"the run server stopped ({e})") from None
        reply = self._next(lambda m: m.get("id") == rid, REPLY_TIMEOUT_S)
        if reply is None or "pid" not in reply:
            raise ServerGone((reply or {}).get("error") or "the run server stopped answering")
        return Launched(self, rid, self._host_pid(reply["pid"]), reply["forked"])

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()  # the server's loop ends at end of input (or after the import it is in)
            deadline = time.monotonic() + 1  # its runs are over: one that has not left by then is killed
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.alive():
                self.proc.kill()
        elif not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait()
        self.proc.stdout.close()
