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
    # BEGIN SOLUTION Returns the model-state bytes one rank holds under `strategy`, as the ZeRO paper counts them:
    #                the weights, the gradients and the optimizer state (with bf16, the fp32 master copy counts as
    #                optimizer state), each whole or 1/N as that strategy shards it, and their total. DDP, fp32 AdamW:
    #                4Ψ + 4Ψ + 8Ψ = 16Ψ at any N; each ZeRO stage shards one more of the three.
    # HINT 1         Each stage adds one kind of state to what is partitioned. Which kind does ZeRO-1 partition
    #                first, and why that one (which is the largest with AdamW)? What does ZeRO-3 leave whole?
    # HINT 2         The bytes per parameter of each kind from the table above; the strategy's position in
    #                STRATEGIES says how many of (optimizer, grads, weights) are divided by N.
    # HINT 3         level = STRATEGIES.index(strategy); optimizer / N if level >= 1, grads / N if level >= 2,
    #                weights / N if level >= 3; total = the sum.
    w, g = (4, 4) if precision == "fp32" else (2, 2)
    k = OPTIMIZER_BYTES[optimizer] + (0 if precision == "fp32" else 4)
    level = STRATEGIES.index(strategy)  # how many of (optimizer, grads, weights) are sharded
    n = world_size
    out = {"weights": w * psi / (n if level >= 3 else 1), "grads": g * psi / (n if level >= 2 else 1),
           "optimizer": k * psi / (n if level >= 1 else 1)}
    out["total"] = sum(out.values())
    return out
    # END SOLUTION
