"""Turns: timed windows taken in turn by separate runs, each window timed by the checker's parent.

A speed check compares the learner's code with the reference. In one process, learner code can slow the
reference down (wrap a torch function both call) or tell which window is the reference's; so each side runs in
a process of its own — the reference's never imports the learner's package — and the parent hands out turns:

    run:    warm up ─ turn() ┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄ [window] turn() ┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄┄ [window] turn() ...
    parent:          stop it ─ go to the other ─ ... ─ go ─┘   stop it ─ go to the other ─ ... ─ go ─┘

A run asks for a turn over its pipe (checker/channel.py) and blocks reading its go pipe; a run of several ranks
asks on rank 0 only, its other ranks waiting for rank 0 in a collective (a barrier), so a window is the whole
run's. The parent:
  - starts the order only once every run has asked (the others' warm-ups never share the machine with a window);
  - stops a run that waits (SIGSTOP to its process group and every descendant): no thread or child of the
    learner's can work while the reference is timed; continues it (SIGCONT) with its go;
  - times each window itself: from the go it wrote to the arrival of the next request, both on its own clock,
    so no reading of the run's counts, and an unequal switch cost falls on both sides alike;
  - refuses a request from a run that is neither the one timed nor one it stopped waiting (a helper moved out
    of the run's tree that wrote its go): `violation` says so, and the check fails on it. A run that writes
    its own go gains only the moment between its request and its stop (~1 ms here; under load, tens);
  - before each of the reference's windows, ends what a run moved out of its process tree (before_go);
  - with `cpu`, also reads each window's CPU seconds itself, from the kernel's accounting of the run's process tree
    (every thread of every process in it, and the children it reaped: cpu_seconds), before the go and once the
    run is stopped after its request: a check of the work done, which a busy neighbour does not stretch, that no
    code in the run can under-report (it reads no number the run sends).
When a run ends, the others are released and the order is over (a run that died leaves nothing to compare).
A run of several ranks takes its turns through rank 0 alone (checker/channel.py: the other ranks have no go pipe,
and a turn asked on their pipes ends the order as a violation): its ranks finish a window together (a barrier)
before rank 0 asks, and wait in a barrier for rank 0's go; stopping the run stops its whole process group.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

from labs.instruments import proctree


class Relay:
    def __init__(self, order: list[str], before_go: Callable[[str], None] = lambda name: None, cpu: bool = False):
        self.order = list(order)  # who takes each window, e.g. learner, reference, reference, learner, ...
        self.before_go = before_go
        self.windows: list[list] = []  # [name, start, end] on the parent's clock, in order
        self.cpu = cpu
        self.cpu_windows: list[list] = []  # with `cpu`: [name, CPU seconds of its process tree], in order
        self._cpu0 = 0.0
        self.violation: str | None = None
        self.gpus: list[str] | None = None  # on GPUs, the members share the first one's (the harness places them)
        self.gpu_owner: str | None = None
        self._members: dict[str, tuple[int, object]] = {}  # name -> (pid, its Channel)
        self._asked: set[str] = set()     # has asked for a turn at least once (its warm-up is done)
        self._waiting: set[str] = set()
        self._holder: str | None = None
        self._start = 0.0
        self._next = 0
        self._over = False
        self._lock = threading.Lock()

    def join(self, name: str, pid: int, chan) -> None:
        """Run `name` started as `pid`, its channel `chan` (a request may have come in before this)."""
        with self._lock:
            self._members[name] = (pid, chan)
            if name in self._waiting:
                self._pause(name)
            elif name == self._holder or (self._over and name in self._asked):
                self._release(name)

    def pids(self) -> set[int]:
        return {pid for pid, _ in self._members.values()}

    def on_turn(self, name: str) -> Callable[[int, float], None]:
        """The Channel callback for run `name` (called from that channel's thread). A run of several ranks asks
        on rank 0 only (the others wait for it in their collectives): a turn asked on another rank's pipe is
        none the checker's code asks for, and the order ends on it."""
        return lambda rank, now: self._asked_by(name, now) if rank == 0 else self._refuse(name, rank)

    def _refuse(self, name: str, rank: int) -> None:
        with self._lock:
            self.violation = (f"the {name} run asked for a turn on rank {rank}, where only rank 0 asks (something "
                              "other than the checker wrote to that rank's pipe): timings not believed")
            self._end()

    def _asked_by(self, name: str, now: float) -> None:
        with self._lock:
            if self._over:
                self._release(name)
                return
            if name == self._holder:
                self.windows.append([name, self._start, now])
                if self.cpu:  # read once it is stopped: the run's own time to the request, and no later work
                    self._pause(name)
                    self.cpu_windows.append([name, cpu_seconds(self._pids(name)) - self._cpu0])
                self._holder, self._next = None, self._next + 1
            elif name in self._asked and name not in self._waiting:
                self.violation = (f"the {name} run began a timed window it was not given (its go pipe was written "
                                  "by something other than the checker): timings not believed")
                self._end()
                return
            self._asked.add(name)
            self._waiting.add(name)
            self._pause(name)
            self._advance()

    def _advance(self) -> None:
        if self._next >= len(self.order):
            self._end()
            return
        who = self.order[self._next]
        if self._holder is None and self._asked >= set(self.order) and who in self._waiting:
            self.before_go(who)
            self._waiting.discard(who)
            if self.cpu:
                self._cpu0 = cpu_seconds(self._pids(who))
            self._holder, self._start = who, time.monotonic()
            self._release(who)

    def left(self, name: str) -> None:
        """A member's run ended: the order is over, and whoever waits goes on."""
        with self._lock:
            self._members.pop(name, None)
            self._end()

    def _end(self) -> None:
        self._over = True
        waiting, self._waiting = list(self._waiting), set()
        for who in waiting:
            self._release(who)

    def _pids(self, name: str) -> set[int]:
        pid = self._members.get(name, (None, None))[0]
        return {pid, *proctree.descendants(pid)} if pid else set()

    def _pause(self, name: str) -> None:
        if name in self._members:
            _signal_group(self._members[name][0], signal.SIGSTOP)
            proctree.signal_each(self._pids(name), signal.SIGSTOP)

    def _release(self, name: str) -> None:
        if name in self._members:
            pid, chan = self._members[name]
            _signal_group(pid, signal.SIGCONT)
            proctree.signal_each(self._pids(name), signal.SIGCONT)
            chan.go()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def turn_rates(relay: Relay, work: dict[str, float], clock: str = "wall") -> tuple[dict[str, list[float]] | None,
                                                                                   str | None]:
    """Parent side: each side's work per second in each of its windows, in order ({name: [rate, ...]}), or
    (None, why) where the turns cannot be believed or never all happened. clock "cpu" (a Relay made with cpu=True):
    work per CPU second of the run's process tree in the window, as the parent read it."""
    if relay.violation:
        return None, relay.violation
    if clock == "cpu":
        done = [(name, 0.0, s) for name, s in relay.cpu_windows if name in work]
        if any(s <= 0 for _, _, s in done):
            return None, "a run's CPU time could not be read (the kernel's per-process clocks: Linux)"
    else:
        done = [w for w in relay.windows if w[0] in work]
    if len(done) < len(relay.order):
        return None, f"only {len(done)} of the {len(relay.order)} timed windows happened"
    rates: dict[str, list[float]] = {}
    for name, t0, t1 in done:
        rates.setdefault(name, []).append(work[name] / max(t1 - t0, 1e-9))
    return rates, None


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pids) -> float:
    """CPU seconds of the processes `pids` (every thread: the kernel's process clock, in ns), plus what each one's
    reaped children used (/proc/PID/stat cutime + cstime, in clock ticks): work moved into a child and waited for
    still counts. A process that has gone counts 0 (it is not in the tree at either reading, or its time is in its
    parent's children's time once reaped)."""
    total = 0.0
    for pid in pids:
        try:
            total += time.clock_gettime(_cpu_clock(pid))
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[13]) + int(fields[14])) / _TICK  # cutime, cstime (fields 16, 17 of stat)
        except (OSError, ValueError, IndexError):
            pass
    return total


def _cpu_clock(pid: int) -> int:
    """The clock id of process `pid`'s CPU time (clock_getcpuclockid(3); Linux lets any process read another's)."""
    import ctypes

    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    cid = ctypes.c_int()
    err = _libc.clock_getcpuclockid(pid, ctypes.byref(cid))
    if err:
        raise OSError(err, os.strerror(err))
    return cid.value


_libc = None
