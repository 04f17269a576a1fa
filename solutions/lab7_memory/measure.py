"""Measure what autograd keeps for backward: every saved tensor, counted once per storage.

`torch.autograd.graph.saved_tensors_hooks(pack, unpack)` calls `pack` on each tensor an op saves. Several
saved tensors may share one storage (q, k and v are views of the qkv output; a Linear and the attention
kernel may save the same tensor), so the bytes that are really held are the distinct storages' sizes.
Parameters are model state, not activations: they are left out.

It sees what the block saves itself. Inside torch.utils.checkpoint the checkpoint's own hooks take the
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
