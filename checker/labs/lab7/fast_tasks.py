"""Lab 7's fast path, worker side: its two runs (the parent's side, what they are graded against, is fast.py).

  fast_measure  the checker's own: for each shape, the baseline step's parts (labs/instruments/fast_path.profile) and
                each option's measured tokens/s ratio (fast_path.measure), in CPU time of one thread, interleaved. It
                never imports the learner's code, so nothing the learner wrote runs beside the clock.
  fast_predict  the learner's predict_speedup on the profiles the parent hands it, and nothing else: a number per
                (profile, option).
"""
from __future__ import annotations

from checker import seams
from checker.labs.lab7 import LAB


def shapes_for(variant: int) -> dict:
    """The two graded shapes, moved by a hidden variant (sequence and batch lengths). Imports torch: worker side."""
    from labs.instruments.fast_path import SHAPES

    (h1, l1, a1, b1, s1), (h2, l2, a2, b2, s2) = SHAPES["launch_bound"], SHAPES["compute_bound"]
    return {"launch_bound": (h1, l1, a1, b1, s1 + 8 * (variant % 3)),
            "compute_bound": (h2, l2, a2, b2 - 2 * (variant % 2), s2 - 16 * (variant % 3))}


def task_fast_measure(ctx, target, variant):
    """The checker's measurements at the variant's shapes; `target` is not imported."""
    from labs.instruments import fast_path

    return {"shapes": fast_path.run(shapes_for(variant))}


def task_fast_predict(ctx, target, profiles):
    seam = seams.load(LAB, target)
    out = ctx.partial

    def predict():
        return {name: {o: float(seam.predict_speedup(dict(p), o)) for o in ("fused_adamw", "bf16", "batch2")}
                for name, p in profiles.items()}
    out["predicted"], out["predicted_error"] = ctx.attempt(predict)
    return out
