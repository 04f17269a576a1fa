# GENERATED from solutions/lab7_memory/planner.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""A memory planner: the cheapest way to fit a training step into a device's memory.

One rank's peak, for a model of P parameters trained with AdamW, fp32 masters, on N ranks, is the sum of what
holds it: the model state as the ZeRO stage leaves it (lab 3's memory model: you derived it there), the
activations every block keeps for one micro-batch (activations.py), and the largest temporary of a model whose
vocabulary is large next to its width: the logits and their gradient, fp32.

Three knobs bring the peak down, each at its own price: a smaller micro-batch costs only more accumulation steps
(the same batch, the same update); recomputation costs compute (one more forward of the blocks, at most); a higher
ZeRO stage costs communication (stage 3 gathers every weight in forward and again in backward). The plan is the
cheapest that fits; plan_memory's contract says which is cheapest.
"""
from __future__ import annotations

from .activations import activation_bytes

RECOMPUTE = ("none", "selective", "full")
STAGES = (0, 1, 2, 3)


def model_state_bytes(n_params: int, stage: int, world_size: int) -> dict[str, int]:
    """Per-rank bytes of weights, gradients and AdamW state under ZeRO `stage` (fp32 throughout)."""
    raise NotImplementedError("TODO(lab7): {'params', 'grads', 'optimizer'}: the bytes one of world_size ranks holds "
                              "of each under ZeRO stage 0 (DDP) to 3, fp32 AdamW (two fp32 moments per parameter), as "
                              "lab 3's memory model counts them, in whole bytes: a share of 1/N rounded down. The "
                              "checker's memory_plan compares the plans' totals with its own, to the byte. (hints: "
                              "checker hint lab7 planner.model_state_bytes)")


def step_bytes(cfg, n_params: int, micro_batch: int, seq: int, world_size: int, stage: int, recompute: str,
               precision: str = "fp32") -> dict[str, int]:
    """Every term of one rank's peak, by what holds it: {name: bytes}, summing to the step's total."""
    raise NotImplementedError("TODO(lab7): {what holds it: bytes} for one rank at a step's peak, whose values sum to "
                              "what plan_memory holds against the budget: the model state as ZeRO `stage` leaves it on "
                              "`world_size` ranks (what model_state_bytes gives), every block's activations for one "
                              "micro-batch of micro_batch x seq tokens in `precision` under `recompute` (this lab's "
                              "estimate, per block), and the logits with their gradient, fp32. Each term counted once; "
                              "the checker's memory_plan compares the totals with its own count, to the byte, at "
                              "budgets where the terms decide the plan. (hints: checker hint lab7 planner.step_bytes)")


def plan_memory(cfg, n_params: int, batch: int, seq: int, world_size: int, budget_bytes: int,
                precision: str = "fp32") -> dict:
    """The cheapest (micro_batch, recompute, zero_stage) whose step_bytes total fits budget_bytes (the contract
    below says which is cheapest).

    Returns {"micro_batch", "grad_accum", "recompute", "zero_stage", "bytes": step_bytes(...), "total", "fits"};
    if nothing fits, the dearest option (micro-batch 1, full recomputation, stage 3) with fits False."""
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
