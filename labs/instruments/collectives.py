"""How much communication hid behind compute: all-reduce timestamps from the host, and interval arithmetic.

    timeline = CollectiveTimeline()          # wraps torch.distributed.all_reduce (install before wrapping)
    timeline.start()
    ... forward, backward, finish_gradient_synchronization() ...
    spans = timeline.stop()
    hidden = overlap_fraction(spans, compute=prof.host_spans("backward"))

Per all-reduce the timeline keeps three things, all time.perf_counter() seconds:
    launch   the call (from a grad hook: during backward; naive DDP: after it)
    done     the collective completed: a callback on its future, run by the backend's thread (gloo), or the
             return of a blocking call
    waits    when the host was busy with it instead of computing: the call itself (the whole collective if
             blocking; enqueueing it if async) and each work.wait()
Overlap fraction = |comm ∩ (compute − waits)| / |comm|: communication time during which this process
was computing instead of waiting. A wrapper that launches early but waits in the same hook scores ~0,
as it should. Example: 7 buckets of 0.4 ms, 6 finish inside backward, the last starts as backward ends
-> 2.4 / 2.8 = 0.86. Naive DDP all-reduces after backward, blocking: 0.

Host timestamps are exact for a CPU backend, whose collectives run on host threads. On a GPU
(`start(device)` with a CUDA device) the host clock says nothing: a collective runs on the backend's own
stream, its future completes when it is queued, and work.wait() makes the compute stream wait, not the host.
There every mark is a CUDA event on the device's timeline (labs.common.dist.stamp), resolved to seconds at
stop(): launch = an event on the compute stream at the call; done = an event on a side stream made to wait
for the collective (dist.completion_stamp); a wait = events before and after work.wait() on the compute
stream, which is stalled in between. Callers mark their own compute windows with `now()` and convert them
with `seconds()` after stop(), so all intervals are on one clock.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from labs.common import dist as cdist

Interval = tuple[float, float]


@dataclass
class Span:
    launch: float
    nbytes: int
    numel: int = 0
    done: float | None = None
    waits: list[Interval] = field(default_factory=list)

    def finish(self, t: float) -> None:
        if self.done is None or t < self.done:
            self.done = t


class _TimedWork:
    """The async handle the caller gets back, its waits timed; everything else goes to the real one."""

    def __init__(self, work, span: Span, timeline: "CollectiveTimeline"):
        self._work, self._span, self._timeline = work, span, timeline

    def wait(self, *args, **kwargs):
        t0 = self._timeline.now()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            t1 = self._timeline.now()
            self._span.waits.append((t0, t1))
            if not self._timeline.on_device:
                self._span.finish(t1)  # it was complete by the time wait() returned

    def __getattr__(self, name):
        return getattr(self._work, name)


class CollectiveTimeline:
    """Every torch.distributed.all_reduce, timed. Install it before code that does
    `from torch.distributed import all_reduce` is imported, so both spellings reach it."""

    def __init__(self):
        import torch.distributed as dist

        self.spans: list[Span] | None = None
        self._dist, self._orig = dist, dist.all_reduce
        self.device, self.on_device, self._origin = None, False, None
        dist.all_reduce = self._all_reduce

    def uninstall(self) -> None:
        if self._dist.all_reduce == self._all_reduce:
            self._dist.all_reduce = self._orig

    def _all_reduce(self, tensor, *args, **kwargs):
        if self.spans is None:
            return self._orig(tensor, *args, **kwargs)
        span = Span(self.now(), tensor.numel() * tensor.element_size(), tensor.numel())
        self.spans.append(span)
        work = self._orig(tensor, *args, **kwargs)
        now = self.now()
        # CPU: inside the call the host is busy with the collective, not computing. GPU: a blocking call makes
        # the compute stream wait for the collective, so `now` is reached only when it is done.
        span.waits.append((span.launch, now))
        if work is None:  # blocking: that was the whole collective
            span.finish(now)
            return None
        if self.on_device:
            span.done = cdist.completion_stamp(self.device, work)
            return _TimedWork(work, span, self)
        try:
            work.get_future().then(lambda _: span.finish(time.perf_counter()))
        except (RuntimeError, AttributeError):
            pass  # a backend without futures: done = the end of the first wait
        return _TimedWork(work, span, self)

    def now(self):
        """A mark on the timeline's clock (the host's, or the device's while recording on a GPU)."""
        return cdist.stamp(self.device) if self.on_device else time.perf_counter()

    def seconds(self, mark) -> float:
        """A mark as seconds (after stop() on a GPU: since start())."""
        if mark is None or isinstance(mark, float):
            return mark
        return cdist.seconds_between(self._origin, mark)

    def start(self, device=None) -> None:
        """Record from now; `device`: the device the collectives run on (a GPU: device-side clock)."""
        self.device = device
        self.on_device = device is not None and cdist.is_async(device)
        self._origin = self.now() if self.on_device else None
        self.spans = []

    def stop(self) -> list[Span]:
        spans, self.spans = self.spans or [], None
        if self.on_device:  # events -> seconds since start() (waits for the last of them)
            cdist.synchronize(self.device)
            for s in spans:
                s.launch, s.done = self.seconds(s.launch), self.seconds(s.done)
                s.waits = [(self.seconds(a), self.seconds(b)) for a, b in s.waits]
        return spans


# ---------------------------------------------------------------- interval arithmetic
def union(intervals) -> list[Interval]:
    """Sorted, non-overlapping cover of the intervals."""
    out: list[list[float]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def length(intervals) -> float:
    return sum(b - a for a, b in union(intervals))


def intersect(xs, ys) -> list[Interval]:
    xs, ys, out, i, j = union(xs), union(ys), [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs, ys) -> list[Interval]:
    """xs with the parts covered by ys removed."""
    out = []
    for a, b in union(xs):
        for c, d in union(ys):
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
        if b > a:
            out.append((a, b))
    return out


def overlap(spans: list[Span], compute) -> tuple[float, float]:
    """(seconds of communication hidden behind `compute` intervals, seconds of communication in all)."""
    comm = [(s.launch, s.done) for s in spans if s.done is not None]
    busy = subtract(compute, [w for s in spans for w in s.waits])
    return length(intersect(comm, busy)), length(comm)


def overlap_fraction(spans: list[Span], compute) -> float | None:
    """Hidden / total communication time; None when there was no communication."""
    hidden, total = overlap(spans, compute)
    return hidden / total if total > 0 else None
