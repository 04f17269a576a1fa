# GENERATED from solutions/lab7_memory/measure.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Measure what autograd keeps for backward: every saved tensor, counted once per storage.

`torch.autograd.graph.saved_tensors_hooks(pack, unpack)` calls `pack` on each tensor an op saves. Several
saved tensors may share one storage (q, k and v are views of the qkv output; a Linear and the attention
kernel may save the same tensor), so the bytes that are really held are the distinct storages' sizes.
Parameters are model state, not activations: they are left out.

It sees what the block saves itself. Inside a checkpointed region, checkpointing's own hooks take the
saved tensors instead (that is how it drops them), so to measure a recomputed block count the storages
still alive after forward instead (the checker does that, with a dispatch mode).
"""
from __future__ import annotations

import torch
from torch.autograd.graph import saved_tensors_hooks


def saved_bytes(module: torch.nn.Module, *inputs, **kwargs) -> tuple[object, dict]:
    """(module(*inputs), {"bytes": distinct saved bytes, "tensors": [(shape, dtype, bytes), ...]})."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, tuple] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), (tuple(t.shape), str(t.dtype).replace("torch.", ""), storage.nbytes()))
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        out = module(*inputs, **kwargs)
    return out, {"bytes": sum(v[2] for v in seen.values()), "tensors": list(seen.values())}


def kept_bytes(model: torch.nn.Module, x: torch.Tensor, run) -> int:
    """Bytes of every storage created while run(x) ran that is still alive afterwards, output and parameters aside:
    what the autograd graph holds for backward, whoever holds it (checkpoint's closure too). x is copied first, so
    the input counts only if something keeps it."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Track(TorchDispatchMode):  # sees every op's outputs below autograd, inside checkpoint's rerun too
        def __init__(self):
            super().__init__()
            self.refs = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    s = t.untyped_storage()
                    self.refs.setdefault(s._cdata, (StorageWeakRef(s), s.nbytes()))
            return out

    skip = {p.untyped_storage()._cdata for p in model.parameters()}
    with Track() as track:
        h = x * 1.0
        out = run(h)
        del h
    skip.add(out.untyped_storage()._cdata)
    return sum(n for k, (ref, n) in track.refs.items() if k not in skip and not ref.expired())
