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
    """Every term of one rank's peak, by what holds it."""
    out = model_state_bytes(n_params, stage, world_size)
    out["activations"] = cfg.n_layer * activation_bytes(cfg, micro_batch, seq, precision, recompute)
    out["logits"] = 2 * 4 * micro_batch * seq * cfg.vocab_size
    return out


def plan_memory(cfg, n_params: int, batch: int, seq: int, world_size: int, budget_bytes: int,
                precision: str = "fp32") -> dict:
    """The first (micro_batch, recompute, zero_stage) in the order above whose step_bytes total fits budget_bytes.

    Returns {"micro_batch", "grad_accum", "recompute", "zero_stage", "bytes": step_bytes(...), "total", "fits"};
    if nothing fits, the last option tried (micro-batch 1, full recomputation, stage 3) with fits False."""
    micro_batches = [m for m in range(batch, 0, -1) if batch % m == 0]
    # BEGIN SOLUTION The cheapest plan whose per-rank total fits budget_bytes: micro-batches largest first (a smaller
    #                one costs only accumulation steps), then recompute none, selective, full (compute), then ZeRO
    #                stage 0 to 3 (communication); the first fit wins, grad_accum = batch / micro_batch. Total = model
    #                state + n_layer x one block's activations + logits and their gradient. None fits: the last tried.
    # HINT 1         A search in order of cost: the nesting of the loops is the policy. Ask: which knob is cheapest to
    #                turn, which dearest (stage 3 gathers every weight twice a step), so which loop is outermost and
    #                which innermost? And what must come back when even the dearest option does not fit?
    # HINT 2         Three nested loops over micro_batches, RECOMPUTE and STAGES; step_bytes gives the parts; build
    #                the dict the docstring names; return at the first fit, else the last dict built.
    # HINT 3         for mb in micro_batches: for recompute in RECOMPUTE: for stage in STAGES: parts = step_bytes(cfg,
    #                n_params, mb, seq, world_size, stage, recompute, precision); total = sum(parts.values()); plan =
    #                {micro_batch, grad_accum: batch // mb, recompute, zero_stage, bytes: parts, total, fits: total <=
    #                budget_bytes}; return plan if it fits. After the loops: return plan (the last one).
    plan = None
    for mb in micro_batches:
        for recompute in RECOMPUTE:
            for stage in STAGES:
                parts = step_bytes(cfg, n_params, mb, seq, world_size, stage, recompute, precision)
                total = sum(parts.values())
                plan = {"micro_batch": mb, "grad_accum": batch // mb, "recompute": recompute, "zero_stage": stage,
                        "bytes": parts, "total": total, "fits": total <= budget_bytes}
                if plan["fits"]:
                    return plan
    return plan
    # END SOLUTION
