# GENERATED from solutions/lab7_memory/planner.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""A memory planner: the cheapest way to fit a training step into a device's memory.

Per rank, for a model of P parameters trained with AdamW, fp32 masters, world size N (lab 3's formulas):
    ZeRO stage   params   grads    optimizer (2 fp32 moments)
    0            4P       4P       8P
    1            4P       4P       8P/N
    2            4P       4P/N     8P/N
    3            4P/N     4P/N     8P/N
plus the activations of one micro-batch: n_layer * activation_bytes(...) (activations.py), plus the logits
and their gradient, fp32: 2 * 4 * b*s*V (the largest temporary of a small-vocabulary-heavy model).

The planner tries, in order of what each costs: the largest micro-batch first (fewer accumulation steps);
then no recomputation, selective, full (more compute); then ZeRO stage 0, 1, 2, 3 (more communication: stage
3 gathers the weights in forward and again in backward). The first that fits is the plan.
"""
from __future__ import annotations

from .activations import activation_bytes

RECOMPUTE = ("none", "selective", "full")
STAGES = (0, 1, 2, 3)


def model_state_bytes(n_params: int, stage: int, world_size: int) -> dict[str, int]:
    """Per-rank bytes of weights, gradients and AdamW state under ZeRO `stage` (fp32 throughout)."""
    p, n = n_params, world_size
    return {"params": 4 * p // (n if stage >= 3 else 1), "grads": 4 * p // (n if stage >= 2 else 1),
            "optimizer": 8 * p // (n if stage >= 1 else 1)}


def step_bytes(cfg, n_params: int, micro_batch: int, seq: int, world_size: int, stage: int, recompute: str,
               precision: str = "fp32") -> dict[str, int]:
    """Every term of one rank's peak, by what holds it: {name: bytes}, summing to the step's total."""
    raise NotImplementedError("TODO(lab7): {what holds it: bytes} for one rank at a step's peak, whose values sum to "
                              "what plan_memory holds against the budget: the model state as ZeRO `stage` leaves it on "
                              "`world_size` ranks (the table above, model_state_bytes), every block's activations for "
                              "one micro-batch of micro_batch x seq tokens in `precision` under `recompute` (this "
                              "lab's estimate, per block), and the logits with their gradient, fp32. Each term counted "
                              "once; the checker's memory_plan compares the totals with its own count, to the byte, at "
                              "budgets where the terms decide the plan. (hints: checker hint lab7 planner.step_bytes)")


def plan_memory(cfg, n_params: int, batch: int, seq: int, world_size: int, budget_bytes: int,
                precision: str = "fp32") -> dict:
    """The first (micro_batch, recompute, zero_stage) in the order above whose step_bytes total fits budget_bytes.

    Returns {"micro_batch", "grad_accum", "recompute", "zero_stage", "bytes": step_bytes(...), "total", "fits"};
    if nothing fits, the last option tried (micro-batch 1, full recomputation, stage 3) with fits False."""
    micro_batches = [m for m in range(batch, 0, -1) if batch % m == 0]
    raise NotImplementedError("TODO(lab7): The plan is the cheapest that fits budget_bytes per rank: the largest "
                              "micro-batch (a divisor of batch) with which any option fits; with it, the least "
                              "recomputation (none, then selective, then full) with which any stage fits; with that, "
                              "the lowest ZeRO stage that fits. Cheapest first: a smaller micro-batch costs only "
                              "accumulation steps, recomputation costs compute (a forward, at most), a higher stage "
                              "costs communication (stage 3 gathers every weight twice a step). micro_batch x "
                              "grad_accum is the batch; bytes are step_bytes' parts, total their sum, fits whether "
                              "total <= budget_bytes. When nothing fits: the dearest option (micro-batch 1, full, "
                              "stage 3) with fits False, so the caller sees by how much the budget falls short. The "
                              "checker grades five budgets, the last too small for anything. (hints: checker hint lab7 "
                              "planner.plan_memory)")
