"""Lab 7's fast path: the learner's predicted speedup of each optimisation, graded against the option measured.

Two runs, in this order:
  fast_measure  the checker's own: for each shape, the baseline step's parts (labs/instruments/fast_path.profile) and
                each option's measured tokens/s ratio (fast_path.measure), in CPU time of one thread, interleaved. It
                never imports the learner's code, so nothing the learner wrote runs beside the clock.
  fast_predict  the learner's predict_speedup on those profiles, and nothing else: a number per (shape, option).
Graded: where the measurement is clear, the prediction's verdict (pays or not) must agree; everywhere, its size must
be within a factor of 2. The thresholds, from the reference's runs here (loads 1-7, 2 cores): the options that pay
measured 1.29-1.97x (fused AdamW and batch2 at the launch-bound shape, bf16 at the compute-bound one), the others
0.52-1.04x; the reference's prediction was within 1.3x of each measurement.
"""
from __future__ import annotations

import math

from checker import seams
from checker.labs._common import Check, error_result, first_error
from checker.report import CheckResult

PAYS = 1.10        # the contract's line: a prediction >= PAYS says "switch it on"
CLEAR_GAIN = 1.25  # measured at least this: it clearly pays, and the prediction must say so
NO_GAIN = 1.02     # measured at most this: it clearly does not, and the prediction must not say it does
FACTOR = 2.0       # prediction / measurement within [1/2, 2]: a noise band (1.3x seen) that a part's own speedup
#                    taken for the step's (fused AdamW 3-5x, bf16 matmuls 0.2-2x alone) falls outside of

# What a wrong prediction of each option most likely left out, by which way it is wrong.
CLUES = {
    ("fused_adamw", "high"): "the optimizer's own speedup is not the step's: the fused kernel saves only the "
                             "optimizer's share of the step",
    ("fused_adamw", "low"): "where the step is small, the optimizer's per-tensor ops are a large share of it",
    ("bf16", "high"): "bf16 changes the matmuls' time and nothing else, and their bf16 time includes the casts: at "
                      "small shapes the casts cost more than the matmuls save",
    ("bf16", "low"): "bf16 changes the matmuls' time and leaves the rest of the step as it was: the step's ratio lies "
                     "between the matmuls' own and 1",
    ("batch2", "high"): "twice the tokens costs twice the per-token work: only what a step costs whatever its size "
                        "is shared (two batch sizes in the profile separate the two)",
    ("batch2", "low"): "most of this small step is paid once per step whatever its size (compare step_s with "
                       "half_step_s): twice the tokens share it",
}


def shapes_for(variant: int) -> dict:
    """The two graded shapes, moved by a hidden variant (sequence and batch lengths)."""
    from labs.instruments.fast_path import SHAPES

    (h1, l1, a1, b1, s1), (h2, l2, a2, b2, s2) = SHAPES["launch_bound"], SHAPES["compute_bound"]
    return {"launch_bound": (h1, l1, a1, b1, s1 + 8 * (variant % 3)),
            "compute_bound": (h2, l2, a2, b2 - 2 * (variant % 2), s2 - 16 * (variant % 3))}


# ---------------------------------------------------------------- worker side
def task_fast_measure(ctx, target, shapes):
    """The checker's measurements; `target` is not imported."""
    import torch

    from labs.instruments import fast_path

    torch.set_num_threads(1)
    out = {}
    for name, shape in shapes.items():
        profile = fast_path.profile(tuple(shape))
        out[name] = {"profile": profile, "measured": fast_path.measure(tuple(shape)),
                     "mfu": profile["flops"] / profile["step_s"] / profile["ceiling_flops_s"]}
    return {"shapes": out}


def task_fast_predict(ctx, target, profiles):
    seam = seams.load("lab7", target)
    out = ctx.partial

    def predict():
        return {name: {o: float(seam.predict_speedup(dict(p), o)) for o in ("fused_adamw", "bf16", "batch2")}
                for name, p in profiles.items()}
    out["predicted"], out["predicted_error"] = ctx.attempt(predict)
    return out


# ---------------------------------------------------------------- checker side
def grade_runs(h, variant: int):
    """The measuring run, then the learner's predictions from its profiles."""
    runs = {"fast_measure": h.run("fast_measure", "fast_measure", dict(shapes=shapes_for(variant)), budget_s=120)}
    if first_error(runs, "fast_measure") is None:
        profiles = {n: r["profile"] for n, r in runs["fast_measure"].result["shapes"].items()}
        runs["fast_predict"] = h.run("fast_predict", "fast_predict", dict(profiles=profiles), budget_s=30)
    return runs


def _verdict(p: float, r: float) -> str | None:
    """Why the prediction p of a measured ratio r is wrong, or None."""
    if not (isinstance(p, float) and math.isfinite(p) and p > 0):
        return f"predicted {p!r}, not a positive ratio"
    if r >= CLEAR_GAIN and p < PAYS:
        return f"predicted {p:.2f}x (does not pay), measured {r:.2f}x"
    if r <= NO_GAIN and p >= PAYS:
        return f"predicted {p:.2f}x (pays), measured {r:.2f}x"
    if abs(math.log(p / r)) > math.log(FACTOR):
        return f"predicted {p:.2f}x, measured {r:.2f}x: off by more than {FACTOR:g}x"
    return None


def fast_path(c: Check, runs) -> CheckResult:
    unit = "predictions wrong"
    err = first_error(runs, "fast_measure")
    if err:  # the checker's own run: not the learner's failure to explain, but no grade either
        return CheckResult(c.name, False, unit=unit, message=f"the checker's measuring run failed: "
                           f"{err.get('type')}: {err.get('message', '')[:200]}", hint="run the grade again; if it "
                           "fails again, `python -m labs.instruments.fast_path` shows the error")
    err = first_error(runs, "fast_predict") or runs["fast_predict"].result.get("predicted_error")
    if err:
        return error_result(c, err, unit)
    measured, predicted = runs["fast_measure"].result["shapes"], runs["fast_predict"].result["predicted"]
    wrong, rows = [], []
    for name, m in measured.items():
        for option, r in m["measured"].items():
            p = predicted.get(name, {}).get(option)
            why = _verdict(p, r)
            rows.append(f"{name} {option} {p:.2f}/{r:.2f}" if isinstance(p, float) else f"{name} {option} ?")
            if why:
                side = "high" if isinstance(p, float) and p > r else "low"
                wrong.append(f"{option} at the {name} shape {tuple(m['profile']['shape'])}: {why} "
                             f"({CLUES[(option, side)]})")
    ok = not wrong
    msg = ("; ".join(wrong[:3]) + (f"; {len(wrong) - 3} more" if len(wrong) > 3 else "")) if wrong else \
        "predicted/measured: " + ", ".join(rows)
    return CheckResult(c.name, ok, value=len(wrong), threshold=0, unit=unit, message=msg, hint=c.hint)


def info(runs) -> list[tuple[str, str]]:
    """Each shape's step against this core's matmul ceiling: the MFU that cannot pass 100%."""
    run = runs.get("fast_measure")
    if run is None or first_error(runs, "fast_measure"):
        return []
    return [(f"fast path, {name}", f"{m['profile']['step_s'] * 1e3:.1f} ms CPU a step, {m['mfu']:.0%} of this "
             "core's fp32 matmul ceiling (attention FLOPs counted)") for name, m in run.result["shapes"].items()]
