# GENERATED from solutions/lab3_sharding/fsdp.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""FSDP2: every parameter becomes a DTensor sharded on dim 0 across the ranks (ZeRO-3).

Before a wrapped module's forward, its parameters are all-gathered; after, the full copies are
freed; backward gathers again and reduce-scatters the gradients, so each rank keeps 1/N of the
weights, the gradients and (because the optimizer only ever sees the local shards) the AdamW
moments: 16Ψ/N bytes of model state per rank in fp32.

The wrapping is yours to choose, and it is the memory/communication trade: each sharded unit is
gathered whole, and every unit costs its own calls. One unit for the whole model would gather it
all at once, which is DDP's memory with ZeRO-3's traffic; many tiny units make many small calls.
Which units keep the peak where apply_fsdp's contract puts it is the question.
"""
from __future__ import annotations

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def apply_fsdp(model: torch.nn.Module, mixed_precision: bool = False) -> torch.nn.Module:
    """Shard `model` in place and return it (the contract below says what must hold).

    mixed_precision: compute in bf16 with fp32 gradient reduction (GPU nodes; the CPU labs use fp32).
    """
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_precision else None
    kwargs = {"mp_policy": mp} if mp else {}
    raise NotImplementedError("TODO(lab3): Returns the same model, every parameter sharded 1/N per rank (16Ψ/N bytes "
                              "of model state at rest with fp32 AdamW), its losses those of unsharded training, and at "
                              "no moment of a forward more parameters unsharded at once than the root's own "
                              "(embeddings, final norm) plus one transformer block's. Whatever is gathered computes "
                              "under the precision options given. (hints: checker hint lab3 fsdp.apply_fsdp)")


def local_bytes(t: torch.Tensor) -> int:
    """Bytes this rank really holds for t: a DTensor's local shard, or the tensor itself."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Lab 1's count, for sharded tensors: only the local shards of params, grads and optimizer state."""
    raise NotImplementedError("TODO(lab3): Defines params, grads and opt: the bytes this rank really holds of the "
                              "parameters, of the gradients that exist, and of every tensor in the optimizer's "
                              "per-parameter state. A sharded tensor counts its local shard only, a plain one all of "
                              "itself. FSDP2 with fp32 AdamW: 4Ψ/N, 4Ψ/N and 8Ψ/N (+ 4 B per step counter), and equal "
                              "to the checker's own count. (hints: checker hint lab3 fsdp.model_state_bytes)")
    return {"params": params, "grads": grads, "optimizer": opt, "total": params + grads + opt}
