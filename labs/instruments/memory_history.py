"""Memory history: every allocation and free a run makes, with the Python stack that made it, as a snapshot in the
format of torch's own `torch.cuda.memory._snapshot()`, which https://pytorch.org/memory_viz opens (drag the
.pickle in) and `torch.cuda._memory_viz` reads.

    with MemoryHistory(device) as history:
        ...train some steps...
        snapshot = history.snapshot()
    save(snapshot, "runs/lab4/memory/logits.pickle")

On a GPU this is torch's recorder itself: `torch.cuda.memory._record_memory_history(max_entries=N)` keeps the
caching allocator's last N events, `_snapshot()` returns them. A CPU has no such recorder, so this emulates it from
the dispatcher: every storage an op creates is an allocation (frames: the Python stack of the op's call), and a
storage found dead after a later op is freed. The CPU has no caching allocator either: each storage is its own
segment (a segment_alloc before its alloc, a segment_free after its free), where a GPU's segments are the
allocator's cudaMalloc'd blocks, each holding many allocations. Storages made before recording began (the
model's weights) appear in neither, as on a GPU.

The snapshot, as memory.py's _snapshot documents it:
    {"segments": [{address, total_size, allocated_size, ..., blocks: [{address, size, requested_size, state,
                   frames}]}],           # what is allocated when the snapshot is taken
     "device_traces": [[{action, addr, size, stream, time_us, frames}, ...]]}   # the events, oldest first
action: "segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"; frames: [{filename, line,
name}], the innermost call first.
"""
from __future__ import annotations

import collections
import pickle
import sys
import time
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MAX_ENTRIES = 100_000  # events kept (the oldest dropped first), as _record_memory_history(max_entries=...)
# The recorder's own innermost frames (this file, the dispatch mode's entry, the dynamo-disabling wrappers around
# it) are no part of the allocating stack; those files' frames further out are (the optimizer runs inside them).
_SKIP = (__file__, "_python_dispatch.py", "_dynamo/eval_frame.py", "torch/_compile.py")
LARGE = 1 << 20  # the CUDA allocator's large pool starts at 1 MiB; a segment's segment_type says which


class MemoryHistory:
    """Record allocations on `device` between enter and exit; snapshot() at any point in between."""

    def __init__(self, device, max_entries: int = MAX_ENTRIES):
        self.device = torch.device(device)
        self.max_entries = max_entries
        self._mode = None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.memory._record_memory_history(max_entries=self.max_entries, stacks="python")
        else:
            self._mode = _Dispatched(self.max_entries).__enter__()
        return self

    def snapshot(self) -> dict:
        if self.device.type == "cuda":
            return torch.cuda.memory._snapshot()
        return self._mode.snapshot()

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.memory._record_memory_history(enabled=None)
        else:
            self._mode.__exit__(*exc)


def save(snapshot: dict, path) -> Path:
    """Pickled, as memory_viz opens it and torch.cuda.memory._dump_snapshot writes it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(snapshot, f)
    return path


def load(path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def _stack() -> tuple:
    """(filename, line, name) of every Python frame calling into the op, innermost first."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.endswith(_SKIP):
        f = f.f_back
    frames = []
    while f is not None:
        frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
        f = f.f_back
    return tuple(frames)


def _frames(stack: tuple) -> list[dict]:
    return [{"filename": fn, "line": line, "name": name} for fn, line, name in stack]


class _Dispatched(TorchDispatchMode):
    """The CPU's recorder. A storage is new when an op returns it and none of the op's inputs holds it (a view or
    an in-place op returns an input's); it is freed when its weak reference has expired. The young (allocated since
    the last sweep) are checked after every op, all of them every SWEEP ops: checking every live storage after
    every op made 1.7 M checks in 8 steps of memleak.py's losses case (2.6 s of its 6.3 under cProfile). So a free
    is stamped at most SWEEP ops late (microseconds to a millisecond here); never after a new storage takes its
    address or its key, which reaps it first (the events at one address alternate alloc, free, as a GPU's do)."""

    SWEEP = 32

    def __init__(self, max_entries: int):
        super().__init__()
        self.trace = collections.deque(maxlen=max_entries)
        self.live: dict[int, tuple] = {}  # storage key -> (weak ref, addr, size, stack)
        self.young: dict[int, int] = {}  # storage key -> its weak ref's cdata, for those allocated since the sweep
        self.at: dict[int, int] = {}  # addr -> storage key of the live storage there
        self.ops = 0

    def _event(self, action: str, addr: int, size: int, stack: tuple) -> None:
        self.trace.append((action, addr, size, time.perf_counter_ns() // 1000, stack))

    def _free(self, key: int) -> None:
        _, addr, size, stack = self.live.pop(key)
        self.young.pop(key, None)
        if self.at.get(addr) == key:
            del self.at[addr]
        for action in ("free_requested", "free_completed", "segment_free"):
            self._event(action, addr, size, stack)

    def _reap(self, every: bool) -> None:
        expired = torch.UntypedStorage._expired  # what StorageWeakRef.expired calls, without two Python calls
        if every:
            dead = [k for k, (ref, *_) in self.live.items() if expired(ref.cdata)]
        else:
            dead = [k for k, weak in self.young.items() if expired(weak)]
        for k in dead:
            self._free(k)
        if every:
            self.young.clear()

    def _expired(self, key: int) -> bool:
        return key in self.live and torch.UntypedStorage._expired(self.live[key][0].cdata)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        self._reap(every=self.ops % self.SWEEP == 0)
        inputs = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        stack = None
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            s = t.untyped_storage()
            key, size, addr = s._cdata, s.nbytes(), s.data_ptr()
            if self._expired(key):  # a dead storage's key, reused: the old one was freed first
                self._free(key)
            if key in inputs or key in self.live or size == 0:
                continue
            if addr in self.at:  # a dead storage's address, reused (two live storages never share one)
                self._free(self.at[addr])
            stack = stack or _stack()
            ref = StorageWeakRef(s)
            self.live[key], self.young[key], self.at[addr] = (ref, addr, size, stack), ref.cdata, key
            self._event("segment_alloc", addr, size, stack)
            self._event("alloc", addr, size, stack)
        return out

    def snapshot(self) -> dict:
        self._reap(every=True)
        frames: dict[tuple, list] = {}  # one list per distinct stack, shared by its events (as pickle keeps it)
        trace = [{"action": a, "addr": addr, "size": size, "stream": 0, "time_us": t,
                  "frames": frames.setdefault(stack, _frames(stack))} for a, addr, size, t, stack in self.trace]
        segments = []
        for _, addr, size, stack in sorted(self.live.values(), key=lambda e: e[1]):
            block = {"address": addr, "size": size, "requested_size": size, "state": "active_allocated",
                     "frames": frames.setdefault(stack, _frames(stack))}
            segments.append({"device": 0, "address": addr, "total_size": size, "stream": 0,
                             "segment_type": "large" if size >= LARGE else "small", "segment_pool_id": (0, 0),
                             "allocated_size": size, "active_size": size, "requested_size": size,
                             "blocks": [block]})
        return {"segments": segments, "device_traces": [trace]}
