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
    # BEGIN SOLUTION {"params", "grads", "optimizer"}: the bytes one of world_size ranks holds of each under ZeRO
    #                stage 0 (DDP) to 3, fp32 AdamW (two fp32 moments per parameter), as lab 3's memory model counts
    #                them, in whole bytes: a share of 1/N rounded down. The checker's memory_plan compares the plans'
    #                totals with its own, to the byte.
    # HINT 1         Lab 3's table, in fp32 with AdamW: which of the three does each stage divide by N?
    # HINT 2         One dict, each entry bytes-per-parameter x n_params, floor-divided by world_size from the
    #                stage that shards it on (optimizer from 1, gradients from 2, weights at 3).
    # HINT 3         {"params": 4P // (N if stage >= 3 else 1), "grads": 4P // (N if stage >= 2 else 1), "optimizer":
    #                8P // (N if stage >= 1 else 1)}.
    p, n = n_params, world_size
    return {"params": 4 * p // (n if stage >= 3 else 1), "grads": 4 * p // (n if stage >= 2 else 1),
            "optimizer": 8 * p // (n if stage >= 1 else 1)}
    # END SOLUTION


def step_bytes(cfg, n_params: int, micro_batch: int, seq: int, world_size: int, stage: int, recompute: str,
               precision: str = "fp32") -> dict[str, int]:
    """Every term of one rank's peak, by what holds it: {name: bytes}, summing to the step's total."""
    # BEGIN SOLUTION {what holds it: bytes} for one rank at a step's peak, whose values sum to what plan_memory holds
    #                against the budget: the model state as ZeRO `stage` leaves it on `world_size` ranks (what
    #                model_state_bytes gives), every block's activations for one micro-batch of micro_batch x seq
    #                tokens in `precision` under `recompute` (this lab's estimate, per block), and the logits with
    #                their gradient, fp32. Each term counted once; the checker's memory_plan compares the totals with
    #                its own count, to the byte, at budgets where the terms decide the plan.
    # HINT 1         A step's peak on one rank is what it stores for the whole step (weights, gradients, optimizer
    #                moments: what ZeRO shards) plus what forward keeps for backward plus the largest temporary. Ask:
    #                which terms grow with the micro-batch, which shrink with the stage, which with neither?
    # HINT 2         Start from model_state_bytes' three entries; add the activations (n_layer blocks, each what
    #                activation_bytes says at this micro-batch, precision and recompute) and the logits (b*s*V fp32
    #                values, and as many for their gradient).
    # HINT 3         out = model_state_bytes(n_params, stage, world_size); out["activations"] = cfg.n_layer *
    #                activation_bytes(cfg, micro_batch, seq, precision, recompute); out["logits"] = 8 * micro_batch *
    #                seq * cfg.vocab_size (4 bytes each, logits and gradient); return out.
    out = model_state_bytes(n_params, stage, world_size)
    out["activations"] = cfg.n_layer * activation_bytes(cfg, micro_batch, seq, precision, recompute)
    out["logits"] = 2 * 4 * micro_batch * seq * cfg.vocab_size
    return out
    # END SOLUTION


def plan_memory(cfg, n_params: int, batch: int, seq: int, world_size: int, budget_bytes: int,
                precision: str = "fp32") -> dict:
    """The cheapest (micro_batch, recompute, zero_stage) whose step_bytes total fits budget_bytes (the contract
    below says which is cheapest).

    Returns {"micro_batch", "grad_accum", "recompute", "zero_stage", "bytes": step_bytes(...), "total", "fits"};
    if nothing fits, the dearest option (micro-batch 1, full recomputation, stage 3) with fits False."""
    micro_batches = [m for m in range(batch, 0, -1) if batch % m == 0]
    # BEGIN SOLUTION The plan is the cheapest that fits budget_bytes per rank: the largest micro-batch (a divisor of
    #                batch) with which any option fits; with it, the least recomputation (none, then selective, then
    #                full) with which any stage fits; with that, the lowest ZeRO stage that fits. Cheapest first: a
    #                smaller micro-batch costs only accumulation steps, recomputation costs compute (a forward, at
    #                most), a higher stage costs communication (stage 3 gathers every weight twice a step).
    #                micro_batch x grad_accum is the batch; bytes are step_bytes' parts, total their sum, fits whether
    #                total <= budget_bytes. When nothing fits: the dearest option (micro-batch 1, full, stage 3) with
    #                fits False, so the caller sees by how much the budget falls short. The checker grades five
    #                budgets, the last too small for anything.
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
