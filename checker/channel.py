"""How a run's worker reports to the checker: one named pipe per rank, read by a thread of the checker.

The worker opens `<out>.rank<R>.pipe` before any learner code is imported and writes JSON lines:
  {"nonce", "mark": t}                 a clock reading of the checker's code (checker/labs/_common.clock)
  {"nonce", "result": {...}, "final"}  what the run measured; final: the task returned or raised
  {"nonce", "turn": true}              the run is ready for its next timed turn (checker/relay.py), and waits
                                       for one byte on `<out>.rank0.go`, which only the checker writes: rank 0
                                       alone takes a run's turns (the others have no go pipe: their turn() returns
                                       at once, and a turn line on their pipes is ignored)
The checker's thread stamps each line with its own clock as it arrives. So:
  - a result is in the checker's hands the moment the task ends; the worker then leaves with os._exit,
    and nothing that arrives after a rank's final result counts (an atexit handler or a leftover thread
    of learner code that sends or writes another is too late);
  - each rank's span of clock readings is compared with the span of their arrival times: a run whose own
    clock ran slower than the checker's (time.perf_counter patched, or the clock helper replaced) has its
    timings refused (Channel.clock_error);
  - the speed checks' windows are re-checked reading by reading against these stamps, in the checker
    (checker/labs/_windows.py).
Lines without the run's nonce are ignored.
"""
from __future__ import annotations

import json
import os
import select
import threading
import time
from pathlib import Path

CLOCK_SLACK = 0.10    # the run's clock may lag the checker's by 10% of the span ...
CLOCK_SLACK_S = 0.25  # ... plus 0.25 s (the reading thread's scheduling on a loaded machine)


def pipe_path(out: Path | str, rank: int) -> Path:
    return Path(f"{out}.rank{rank}.pipe")


def go_path(out: Path | str, rank: int) -> Path:
    return Path(f"{out}.rank{rank}.go")


class Channel:
    """The checker's end of one run's pipes (nproc of them)."""

    def __init__(self, out: Path, nproc: int, nonce: str, on_turn=None):
        self.nonce = nonce
        self.on_turn = on_turn  # called (rank, arrival stamp) from this channel's thread when a run asks for a turn
        self.results: dict[int, dict] = {}
        self.final: set[int] = set()
        self.marks: dict[int, list[tuple[float, float]]] = {}  # rank -> [(run's clock, checker's clock)]
        self._fds: dict[int, int] = {}
        self._keep: list[int] = []
        self._buf: dict[int, bytes] = {}
        for r in range(nproc):
            p = pipe_path(out, r)
            p.unlink(missing_ok=True)
            os.mkfifo(p, 0o600)
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
            self._keep.append(os.open(p, os.O_WRONLY))  # so reads never see end-of-file between writers
            self._fds[fd], self._buf[fd] = r, b""
        self._go: dict[int, int] = {}  # rank -> the write end of its go pipe (a run that takes turns)
        if on_turn is not None:  # rank 0 alone takes a run's turns: the relay stops and continues the whole group
            p = go_path(out, 0)
            p.unlink(missing_ok=True)
            os.mkfifo(p, 0o600)
            self._keep.append(os.open(p, os.O_RDONLY | os.O_NONBLOCK))  # never read: lets the write end open
            self._go[0] = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
        self._stop = threading.Event()
        # close() writes a byte here: the thread wakes at once to read what is left, rather than at its next
        # timeout (up to 0.2 s after every run, most of a short run's cost to the checker)
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._drain(0.2)
        self._drain(0.0)

    def _drain(self, timeout_s: float) -> None:
        ready, _, _ = select.select([*self._fds, self._wake_r], [], [], timeout_s)
        now = time.monotonic()
        for fd in ready:
            if fd == self._wake_r:
                continue
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                self._buf[fd] += chunk
            *lines, self._buf[fd] = self._buf[fd].split(b"\n")
            for line in lines:
                self._take(self._fds[fd], line, now)

    def _take(self, rank: int, line: bytes, now: float) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict) or msg.get("nonce") != self.nonce or rank in self.final:
            return
        if "mark" in msg:
            self.marks.setdefault(rank, []).append((float(msg["mark"]), now))
        if msg.get("turn") is True and self.on_turn is not None and rank == 0:  # another rank has no turns to ask
            self.on_turn(rank, now)
        if isinstance(msg.get("result"), dict):
            self.results[rank] = msg["result"]
            if msg.get("final"):
                self.final.add(rank)

    def go(self, rank: int = 0) -> None:
        """Let the run's rank begin its turn (checker/relay.py)."""
        try:
            os.write(self._go[rank], b"g")
        except (KeyError, OSError):  # closed: the run has ended
            pass

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        for fd in [*self._fds, *self._keep, *self._go.values(), self._wake_r, self._wake_w]:
            os.close(fd)

    def clock_error(self) -> dict | None:
        """A rank whose clock readings span less time than the checker saw them arrive over."""
        for rank, marks in sorted(self.marks.items()):
            if len(marks) < 2:
                continue
            own, seen = marks[-1][0] - marks[0][0], marks[-1][1] - marks[0][1]
            if own < seen * (1 - CLOCK_SLACK) - CLOCK_SLACK_S:
                return {"type": "ClockMismatch", "t": 0.0,
                        "message": f"rank {rank}'s clock measured {own:.2f} s where the checker's measured "
                                   f"{seen:.2f} s: timings from a run whose clock was changed (time.perf_counter "
                                   "patched?) are not believed. Make the code faster instead of the clock"}
        return None


class Sender:
    """The worker's end: opened before learner code runs."""

    def __init__(self, out: Path | str, rank: int, nonce: str):
        self.nonce = nonce
        try:
            self.fd: int | None = os.open(pipe_path(out, rank), os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(self.fd, True)
        except OSError:  # not started by the harness (a test calling a task directly)
            self.fd = None
        try:  # a run that takes turns (checker/relay.py) has a go pipe
            self.go_fd: int | None = os.open(go_path(out, rank), os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(self.go_fd, True)
        except OSError:
            self.go_fd = None

    def turn(self) -> None:
        """Ask for the next turn and wait until the checker gives it (at once where there are no turns)."""
        if self.go_fd is None or not self.send(turn=True):
            return
        if not os.read(self.go_fd, 1):
            raise RuntimeError("the checker closed this run's turns")

    def send(self, **msg) -> bool:
        if self.fd is None:
            return False
        data = json.dumps({**msg, "nonce": self.nonce}).encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        return True


SENDER: Sender | None = None  # the worker's, once it has opened its pipe (checker/worker.py)
