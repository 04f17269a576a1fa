"""Instruments for pipeline and tensor parallelism: a stage whose cost is known, and an activation meter.

SleepStage: a pipeline stage that *sleeps* a fixed time per micro-batch (forward_s, backward_s) around a
small Linear, and records when each micro-batch's forward and backward ran on it. With the compute a
known constant, a schedule's timeline measures only the schedule: on 2 busy CPU cores a real stage's
time varies by +-15%, a 15 ms sleep by well under 1%. Events go to `.events` in the format of
labs.instruments.schedule_timeline (kind, mb, start, end).
How the backward is timed without trusting the schedule: two autograd marks inside the stage. The
mark on the output runs first in backward (records the start, then sleeps backward_s); the mark on
the input side runs last (records the end).
On a GPU the clock is the device's: a received activation arrives when the stream gets there, not when
dist.recv returns to the host (NCCL only queues the wait), so the stage synchronises the device before
each timestamp: the host clock then reads when the data really arrived and the compute really ended.

SavedTensorBytes: bytes autograd holds for backward right now, and their peak, from
torch.autograd.graph.saved_tensors_hooks. That is the activation memory: every tensor an op saved
to compute its gradient (inputs of matmuls, attention probabilities, GELU inputs...), counted once
per storage, weights excluded (they are parameters, not activations).
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn

from labs.common import dist as cdist


class _Mark(torch.autograd.Function):
    """Identity both ways; its backward records (and, at a stage's output, sleeps)."""

    @staticmethod
    def forward(ctx, x, stage, mb, where):
        ctx.stage, ctx.mb, ctx.where = stage, mb, where
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.stage._backward_mark(ctx.mb, ctx.where)
        return grad, None, None, None


class SleepStage(nn.Module):
    """One pipeline stage: (micro_batch, width) float in, the same shape out, a known cost per micro-batch."""

    def __init__(self, width: int, forward_s: float, backward_s: float):
        super().__init__()
        self.inp = nn.Parameter(torch.zeros(width))  # gives the input side a gradient, so its mark runs last
        self.lin = nn.Linear(width, width)
        self.forward_s, self.backward_s = forward_s, backward_s
        self.reset()

    def reset(self) -> None:
        """Forget the recorded step; the next forward is micro-batch 0."""
        self.events: list[dict] = []
        self._n, self._bwd_start = 0, {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "meta":  # shape inference (torch.distributed.pipelining): no time, no event
            return self.lin(x + self.inp)
        mb, self._n = self._n, self._n + 1
        cdist.synchronize(x.device)  # the input is here (a GPU: the receive on the stream has completed)
        t0 = time.perf_counter()
        h = _Mark.apply(x + self.inp, self, mb, "end")
        time.sleep(self.forward_s)
        y = _Mark.apply(self.lin(h), self, mb, "start")
        cdist.synchronize(x.device)
        self.events.append({"kind": "F", "mb": mb, "start": t0, "end": time.perf_counter()})
        return y

    def _backward_mark(self, mb: int, where: str) -> None:
        cdist.synchronize(self.inp.device)  # the gradient is here / the backward's kernels are done
        now = time.perf_counter()
        if where == "start":
            self._bwd_start[mb] = now
            time.sleep(self.backward_s)
        else:
            self.events.append({"kind": "B", "mb": mb, "start": self._bwd_start.pop(mb, now), "end": now})


class _Saved:
    __slots__ = ("tensor", "key", "meter")

    def __init__(self, tensor, key, meter):
        self.tensor, self.key, self.meter = tensor, key, meter

    def __del__(self):  # the graph that saved it was freed (after its backward, or when dropped)
        self.meter._release(self.key)


def _storage(t: torch.Tensor):
    """The memory behind t: a DTensor's is its local shard's."""
    return (t.to_local() if hasattr(t, "to_local") else t).untyped_storage()


class SavedTensorBytes:
    """`with SavedTensorBytes(model) as m: ...`; m.now, m.peak: bytes saved for backward (weights excluded)."""

    def __init__(self, *modules: nn.Module):
        self.params = {_storage(p).data_ptr() for mod in modules for p in mod.parameters()}
        self.now = self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage -> [bytes, how many saved tensors use it]

    def _pack(self, t: torch.Tensor):
        if t.device.type == "meta":
            return t
        storage = _storage(t)
        key = storage.data_ptr()
        if key in self.params:
            return t
        entry = self._refs.setdefault(key, [storage.nbytes(), 0])
        if entry[1] == 0:
            self.now += entry[0]
            self.peak = max(self.peak, self.now)
        entry[1] += 1
        return _Saved(t, key, self)

    @staticmethod
    def _unpack(h):
        return h.tensor if isinstance(h, _Saved) else h

    def _release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry:
            entry[1] -= 1
            if entry[1] == 0:
                self.now -= entry[0]
                del self._refs[key]

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
