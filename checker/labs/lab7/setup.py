"""Lab 7's runs: their shapes, seeds and scenarios. Both sides read them: the worker side (tasks.py) runs them, the
parent side (plan.py) moves them by the hidden variant and hands them over, checks.py computes what they must give."""
from __future__ import annotations

SEED = 7
# (n_embd, n_head, batch, seq, dropout): the public shapes; a hidden variant moves them (plan.grade).
# One head (a = 1) or one sequence (b = 1): q, k, v reshape to (b, a, s, d) by merging dims, so v stays a view of
# the qkv output, whose whole base (3 bsh) it keeps; the two shapes catch the two halves of that rule.
SHAPES = [(64, 4, 2, 64, 0.1), (96, 3, 3, 40, 0.1), (48, 2, 4, 24, 0.0), (48, 1, 2, 32, 0.1), (64, 4, 1, 48, 0.1)]
# The estimate under recomputation, at the first ESTIMATE_RECOMPUTED shapes (dropout on and off), in both precisions,
# against the blocks measured under the checker's own checkpointing: graded apart from the learner's recompute.py.
RECOMPUTE, ESTIMATE_RECOMPUTED = ("selective", "full"), 3
PRECISIONS = ("fp32", "bf16")  # activation_estimate grades the learner's count in both
AMP_STEPS, AMP_BATCH, AMP_LR = 8, 8, 3e-3
SCALE_STEPS, OVERFLOW_AT = 6, 3    # fp16 steps; the checker's inf lands in step 3's backward
# The scale's feedback loop, driven by the checker on one parameter: G - 1 clean steps, an overflow (a NaN in one
# gradient; the fp16 run's overflow is an inf, so a scaler that looks for inf alone is caught here), 2G + 1 clean
# steps. The scale must halve, stay for G clean steps (the count restarted), double, stay G more, double. A count
# kept across the overflow doubles it after 1 clean step; a count that must pass G doubles it a step late.
# G: GROWTH_INTERVAL, moved by hidden variants (plan.grade).
GROWTH_INTERVAL = 2
# Timing: wide enough that matmuls, not Python, dominate a step (h = 128: ~30 ms fwd+bwd on one core, CPU time).
# reps windows a side, of `steps` steps each, the two sides' runs taking turns (timing_order).
TIMING = dict(n_embd=128, n_head=4, batch=8, seq=64, reps=10, steps=4)


def timing_order(learner: str, baseline: str) -> list[str]:
    """recompute_cost's windows: pairs, the learner's first in every other one (a pair's two windows back to back)."""
    return [w for k in range(TIMING["reps"]) for w in ((learner, baseline) if k % 2 == 0 else (baseline, learner))]
# fp8: a stream of tensors whose amax rises, falls and starts at zero, a short history and a margin, so delayed
# scaling differs from current scaling, from a history never rolled, and from one without its margin
FP8 = dict(amax=(0.0, 3.0, 40.0, 2.0, 900.0, 5.0, 0.5, 70.0, 1.0), history=3, margin=1, rows=16, cols=24, steps=4)
# Planner scenarios: GPT-2 small's shape (124 M parameters), batch 16 x 1024 tokens, 8 ranks, five budgets (GiB); at
# 0.5 GiB nothing fits (micro-batch 1, full, ZeRO-3 needs 0.65 GiB: 0.23 model state + 0.38 logits + 0.04 blocks), so
# the contract's "the last one tried, fits False" is graded too.
PLAN_KEYS = ("micro_batch", "grad_accum", "recompute", "zero_stage", "total", "fits")  # what memory_plan compares
PLAN = dict(config="gpt2-124m", n_params=124_475_904, batch=16, seq=1024, world_size=8,
            budgets_gib=(80, 16, 6, 2, 0.5))


def plan_cfg() -> dict:
    """The planner's model config as a dict (the checker's side does not import torch)."""
    return {"gpt2-124m": dict(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                              dropout=0.0)}[PLAN["config"]]
