"""Where a training step's time goes: data wait, forward, backward, communication wait, optimizer.

    prof = StepProfiler(env.device).attach(model, optimizer)   # hooks mark forward, backward, optimizer
    for step in ...:
        prof.begin_step()
        with prof.phase("data"):
            batch = next(loader)
        loss = train_step(model, optimizer, scheduler, batch)     # no change to the step itself
        rec = prof.end_step()     # {"data_s", "forward_s", "backward_s", "comm_s", "optimizer_s", "other_s", ...}

Always on: the hooks cost a clock read per parameter per step (tiny: 28 reads, ~0.1% of a 28 ms step;
`make bench` measures it). Phases are marked on the device's own timeline (labs.common.dist.stamp), so
on a GPU a phase is its kernels' time, not their launches'. Marks:
    forward    model forward pre-hook -> forward hook (every micro-step adds up)
    backward   forward hook -> the end of the backward pass (an autograd engine callback, queued from the
               first gradient hook; it runs once every hook, a DDP wrapper's included, has run)
    comm       explicit: `with prof.phase("comm"): ddp.finish_gradient_synchronization()` (exposed comm)
    optimizer  optimizer.step pre-hook -> post-hook
    other      the step's wall time minus all of the above: zero_grad, clipping, the scheduler, .item()
Derived: input stall = data / step time (the fraction of the step the model sat waiting for its batch).
While torch.profiler records (labs.instruments.trace) the phases also appear in the trace as named ranges.
"""
from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from contextlib import contextmanager

import torch

from labs.common import dist as cdist

PHASES = ("data", "forward", "backward", "comm", "optimizer")


class CpuUtilisation:
    """This process's CPU seconds (all its threads, user + system) per wall second since the last read.

    1.0 = one core kept busy. A rank at 0.5 spent half its time blocked: waiting for data, a peer or the
    device. Above 1: helper threads (gloo's, intra-op) worked alongside. DataLoader workers are other
    processes and are not counted here.
    """

    def __init__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def read(self) -> float:
        cpu, wall = time.process_time(), time.perf_counter()
        util = (cpu - self.cpu) / (wall - self.wall) if wall > self.wall else float("nan")
        self.cpu, self.wall = cpu, wall
        return util


class _Range:
    """A named range in a torch.profiler trace, opened and closed from hooks (only while a trace records)."""

    def __init__(self, name: str):
        self.rf = None
        if torch.autograd._profiler_enabled():
            self.rf = torch.autograd.profiler.record_function(name)
            self.rf.__enter__()
        self.thread = threading.get_ident()

    def close(self) -> bool:
        """False if called from another thread (a GPU's backward callback): the owner closes it later."""
        if self.rf is not None:
            if threading.get_ident() != self.thread:
                return False
            self.rf.__exit__(None, None, None)
            self.rf = None
        return True


class StepProfiler:
    def __init__(self, device: torch.device, gpu_sample_s: float = 5.0, keep: int = 10_000):
        self.device = device
        self.records: deque[dict] = deque(maxlen=keep)  # the last `keep` steps (a long run must not grow)
        self.steps = 0
        self.cpu = CpuUtilisation()
        self.gpu_sample_s, self._gpu_t, self._gpu = gpu_sample_s, float("-inf"), None
        self._handles: list = []
        self._begin = None
        self._reset()

    # ---- hooks
    def attach(self, model: torch.nn.Module | None = None, optimizer=None) -> "StepProfiler":
        """Mark forward and backward from hooks on `model` (the plain model: wrappers call it), the optimizer
        phase from `optimizer`'s step hooks. Call after any wrapper registered its own gradient hooks, so
        the backward mark comes after theirs."""
        if model is not None:
            self._handles += [model.register_forward_pre_hook(self._forward_begin),
                              model.register_forward_hook(self._forward_end)]
            self._handles += [p.register_post_accumulate_grad_hook(self._grad_ready)
                              for p in model.parameters() if p.requires_grad]
        if optimizer is not None and hasattr(optimizer, "register_step_pre_hook"):
            self._handles += [optimizer.register_step_pre_hook(lambda *a: self._open("optimizer")),
                              optimizer.register_step_post_hook(lambda *a: self._close("optimizer"))]
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _forward_begin(self, module, args) -> None:
        self._open("forward")

    def _forward_end(self, module, args, output) -> None:
        self._close("forward")
        if torch.is_grad_enabled():
            self._open("backward")  # closed by the engine callback queued from the first gradient hook
            self._backward_queued = False

    def _grad_ready(self, param) -> None:
        if not self._backward_queued and "backward" in self._open_at:
            self._backward_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self._close("backward")

    # ---- explicit phases and steps
    @contextmanager
    def phase(self, name: str):
        """Time a phase the hooks cannot see: `data` (waiting for the batch), `comm` (waiting for gradients)."""
        self._open(name)
        try:
            yield
        finally:
            self._close(name)

    def begin_step(self) -> None:
        self._reset()
        self._begin = cdist.stamp(self.device)

    def end_step(self, **extra) -> dict:
        """This step's phases in seconds, its input stall, this process's CPU utilisation (and the GPU's, sampled
        every gpu_sample_s). Keeps the record for summary()."""
        end = cdist.stamp(self.device)
        for name in list(self._open_at):  # a phase still open (forward without backward: eval) is dropped
            self._unclosed.append(self._open_at.pop(name)[1])
        for rng in self._unclosed:
            rng.close()
        step_s = cdist.seconds_between(self._begin, end) if self._begin is not None else float("nan")
        rec = {f"{n}_s": sum(cdist.seconds_between(a, b) for a, b in self._spans.get(n, [])) for n in PHASES}
        rec["comm_s"] = rec["comm_s"] if "comm" in self._spans else None  # None: no separate wait (inside backward)
        rec["other_s"] = step_s - sum(v for v in rec.values() if v is not None)
        rec["step_s"] = step_s
        rec["input_stall"] = rec["data_s"] / step_s if step_s > 0 else float("nan")
        rec["cpu_util"] = self.cpu.read()
        if cdist.is_async(self.device) and time.monotonic() - self._gpu_t >= self.gpu_sample_s:
            self._gpu_t, self._gpu = time.monotonic(), cdist.gpu_utilisation(self.device)
        if self._gpu is not None:
            rec["gpu_util"] = self._gpu
        rec.update(extra)
        self.records.append(rec)
        self.steps += 1
        self._begin = None
        return rec

    def host_spans(self, name: str) -> list[tuple[float, float]]:
        """This step's (start, end) of a phase in time.perf_counter() seconds; only on a synchronous device,
        where a stamp is the host clock (what labs.instruments.collectives compares its timestamps with)."""
        return [] if cdist.is_async(self.device) else list(self._spans.get(name, []))

    def summary(self, skip: int = 2) -> dict:
        """Mean seconds per phase over the steps after the first `skip` (warm-up), and the run's input stall:
        total data wait / total step time."""
        recs = list(self.records)
        recs = recs[skip:] if self.steps == len(recs) and len(recs) > skip else recs  # warm-up: only if still kept
        if not recs:
            return {}
        out = {f"{n}_s": statistics.fmean(r[f"{n}_s"] or 0.0 for r in recs) for n in (*PHASES, "other", "step")}
        if all(r["comm_s"] is None for r in recs):
            out["comm_s"] = None
        out["input_stall"] = sum(r["data_s"] for r in recs) / sum(r["step_s"] for r in recs)
        out["cpu_util"] = statistics.fmean(r["cpu_util"] for r in recs)
        out["steps"] = len(recs)
        return out

    # ---- bookkeeping
    def _reset(self) -> None:
        self._spans: dict[str, list] = {}
        self._open_at: dict[str, tuple] = {}
        self._backward_queued = False
        self._unclosed: list[_Range] = []

    def _open(self, name: str) -> None:
        self._unclosed = [r for r in self._unclosed if not r.close()]
        if name in self._open_at:  # reopened before it closed (two forwards, one backward): the later one counts
            self._unclosed.append(self._open_at.pop(name)[1])
        self._open_at[name] = (cdist.stamp(self.device), _Range(name))

    def _close(self, name: str) -> None:
        if name in self._open_at:
            begin, rng = self._open_at.pop(name)
            self._spans.setdefault(name, []).append((begin, cdist.stamp(self.device)))
            if not rng.close():
                self._unclosed.append(rng)


def format_phases(rec: dict) -> str:
    """'data 1.2 | fwd 8.0 | bwd 15.1 | comm 0.4 | opt 2.0 | other 1.1 ms' for a log line."""
    short = {"data": "data", "forward": "fwd", "backward": "bwd", "comm": "comm", "optimizer": "opt", "other": "other"}
    parts = [f"{s} {1e3 * rec[f'{n}_s']:.1f}" for n, s in short.items() if rec.get(f"{n}_s") is not None]
    return " | ".join(parts) + " ms"
