"""A short, scheduled torch.profiler window exported as a trace you open in https://ui.perfetto.dev or
chrome://tracing (drag the .json file in). docs/reading-a-trace.md says what to look for.

    trace = TraceWindow(out / f"trace-rank{rank}.json", device, wait=5, warmup=2, active=3)
    with trace:
        for step in ...:
            ...train...
            trace.step()

Why a window: recording every op costs ~2x the step and a trace of 3 steps of `tiny` is already ~1 MB,
so skip the first `wait` steps (start-up, allocator growth), record `warmup` steps and throw them away
(the profiler's own start-up cost lands there), then keep `active` steps.
What the trace holds: every op on the host threads (aten::*, autograd's backward functions), the
StepProfiler's phases as named ranges (data, forward, backward, comm, optimizer), ProfilerStep#N per
step, collectives (gloo:all_reduce on gloo's own threads; on a GPU the NCCL kernels on their stream).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch.profiler import profile, schedule

from labs.common import dist as cdist

from .collectives import intersect, length, union

PHASE_NAMES = ("data", "forward", "backward", "comm", "optimizer")
COMM = re.compile(cdist.COLLECTIVE_TRACE_NAMES, re.I)


class TraceWindow:
    def __init__(self, path, device: torch.device, wait: int = 5, warmup: int = 2, active: int = 3,
                 enabled: bool = True):
        self.path, self.enabled = Path(path), enabled
        activities = cdist.profiler_activities(device)
        when = schedule(wait=wait, warmup=warmup, active=active, repeat=1)  # one window, not one per cycle
        self._prof = profile(activities=activities, schedule=when, on_trace_ready=self._export) if enabled else None
        self.written: Path | None = None

    def _export(self, prof) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.path))
        self.written = self.path

    def __enter__(self):
        if self._prof is not None:
            self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        if self._prof is not None:
            self._prof.__exit__(*exc)

    def step(self) -> None:
        """Call once at the end of every training step."""
        if self._prof is not None:
            self._prof.step()


# ---------------------------------------------------------------- reading a trace back
def read_trace(path) -> list[dict]:
    """The complete events ('ph': 'X': a name, a start `ts` and a duration `dur`, in microseconds)."""
    return [e for e in json.loads(Path(path).read_text())["traceEvents"] if e.get("ph") == "X"]


def thread_names(path) -> dict:
    """{tid: name} from the trace's metadata, e.g. 'thread 123 (pt_gloo_runloop)'."""
    names: dict = {}
    for e in json.loads(Path(path).read_text())["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            old = names.get(e["tid"], "")
            if not old or "(python" in old:  # a thread may be named twice; keep the telling name (gloo's)
                names[e["tid"]] = e["args"]["name"]
    return names


def spans_of(events, pattern) -> list[tuple[float, float]]:
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return [(e["ts"], e["ts"] + e["dur"]) for e in events if rx.search(e.get("name", ""))]


def overlap_from_trace(events) -> float | None:
    """Communication time hidden behind compute, from a trace alone (the GPU's way to get what
    labs.instruments.collectives measures from host timestamps on CPU).

    GPU: collective kernels (NCCL) vs every other kernel, both on the device's clock.
    CPU: collective intervals on gloo's threads vs the `backward` ranges on the training thread.
    """
    comm = union(spans_of(events, COMM))
    total = length(comm)
    if total == 0:
        return None
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if kernels:
        compute = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if not COMM.search(e.get("name", ""))]
    else:
        compute = spans_of(events, r"^backward$")
    return length(intersect(comm, compute)) / total
