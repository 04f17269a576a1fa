# GENERATED from solutions/lab3_sharding/memory_model.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Predicted model-state bytes per rank: the ZeRO paper's table, for the notebook's calculator.

Bytes per parameter, Ψ parameters, N ranks. K = optimizer state per parameter (AdamW: two fp32
moments, 8 B; SGD with momentum: 4 B; plain SGD: 0).
    fp32:           weights 4, grads 4, optimizer K
    mixed (bf16):   weights 2, grads 2, optimizer K + 4 (an fp32 master copy of the weights)
Which of them each strategy divides by N is yours to derive (this lab's README); the
checker's memory checks measure what each strategy really holds, and `memory_model` grades this.
(DeepSpeed stages 1-2 in fp32 keep a master copy anyway: + 4Ψ/N; see deepspeed_zero.py.)
"""
from __future__ import annotations

STRATEGIES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP")
OPTIMIZER_BYTES = {"AdamW": 8, "SGD+momentum": 4, "SGD": 0}


def bytes_per_rank(psi: float, world_size: int, strategy: str, precision: str = "fp32",
                   optimizer: str = "AdamW") -> dict:
    """{"weights", "grads", "optimizer", "total"} in bytes for one rank (precision "fp32" or "bf16")."""
    raise NotImplementedError("TODO(lab3): Returns the model-state bytes one rank holds under `strategy`, as the ZeRO "
                              "paper counts them: the weights, the gradients and the optimizer state (with bf16, the "
                              "fp32 master copy counts as optimizer state), each whole or 1/N as that strategy shards "
                              "it, and their total. DDP, fp32 AdamW: 4Ψ + 4Ψ + 8Ψ = 16Ψ at any N; each ZeRO stage "
                              "shards one more of the three. (hints: checker hint lab3 memory_model.bytes_per_rank)")
