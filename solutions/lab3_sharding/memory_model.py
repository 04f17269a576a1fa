"""Predicted model-state bytes per rank: the ZeRO paper's table, for the notebook's calculator.

Bytes per parameter, Ψ parameters, N ranks. K = optimizer state per parameter (AdamW: two fp32
moments, 8 B; SGD with momentum: 4 B; plain SGD: 0).
    fp32:           weights 4, grads 4, optimizer K
    mixed (bf16):   weights 2, grads 2, optimizer K + 4 (an fp32 master copy of the weights)
Which of them are divided by N: ZeRO-1 the optimizer's, ZeRO-2 also the gradients, ZeRO-3 / FSDP all.
(DeepSpeed stages 1-2 in fp32 keep a master copy anyway: + 4Ψ/N; see deepspeed_zero.py.)
"""
from __future__ import annotations

STRATEGIES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP")
OPTIMIZER_BYTES = {"AdamW": 8, "SGD+momentum": 4, "SGD": 0}


def bytes_per_rank(psi: float, world_size: int, strategy: str, precision: str = "fp32",
                   optimizer: str = "AdamW") -> dict:
    """{"weights", "grads", "optimizer", "total"} in bytes for one rank."""
    w, g = (4, 4) if precision == "fp32" else (2, 2)
    k = OPTIMIZER_BYTES[optimizer] + (0 if precision == "fp32" else 4)
    level = STRATEGIES.index(strategy)  # how many of (optimizer, grads, weights) are sharded
    n = world_size
    out = {"weights": w * psi / (n if level >= 3 else 1), "grads": g * psi / (n if level >= 2 else 1),
           "optimizer": k * psi / (n if level >= 1 else 1)}
    out["total"] = sum(out.values())
    return out
