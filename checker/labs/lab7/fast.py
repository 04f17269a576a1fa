"""Lab 7's fast path, parent side: the learner's predicted speedup of each optimisation, graded against the option
measured and against the arithmetic of profiles from other devices. Its check is declared here, on its evaluator, with
the runs it starts (grade_runs) and what they measured beside it (info); checks.py appends it to lab 7's CHECKS.

Two runs (their worker side: fast_tasks.py), in this order:
  fast_measure  the checker's own: for each shape, the baseline step's parts (labs/instruments/fast_path.profile) and
                each option's measured tokens/s ratio (fast_path.measure), in CPU time of one thread, interleaved. It
                never imports the learner's code, so nothing the learner wrote runs beside the clock.
  fast_predict  the learner's predict_speedup on those profiles and on the checker's made-up ones (OTHER_DEVICES), and
                nothing else: a number per (profile, option).
Graded, on this machine's profiles: where the measurement is clear, the prediction's verdict (pays or not) must agree;
everywhere, its size must be within a factor of 2 (measured here, loads 1-7 on 2 cores: the options that pay
1.29-1.97x, the others 0.52-1.05x; the reference within 1.35x of each). A factor of 2 is noise's band, and a blind
learner's 16 wrong predictions showed how much fits in it (a bf16 gain taken for the matmuls' alone, batch2 read off
the half-to-full step, a fixed cost that is only the optimizer: 7 passed). So the same function also meets profiles
this machine cannot give (a GPU's sub-millisecond step with 5x faster bf16 matmuls, a CPU without bf16 instructions,
an optimizer-bound step, a step whose half costs three quarters of it), where no clock is involved: there each
prediction must be within 10% of what the profile's own numbers give (Amdahl on the parts; the fixed and per-token
parts from the two batch sizes), the arithmetic the README teaches.
"""
from __future__ import annotations

import math

from checker.labs._common import Check, declare, error_result, first_error
from checker.labs.lab7 import WHERE
from checker.report import CheckResult

PAYS = 1.10        # the contract's line: a prediction >= PAYS says "switch it on"
CLEAR_GAIN = 1.25  # measured at least this: it clearly pays, and the prediction must say so
NO_GAIN = 1.02     # measured at most this: it clearly does not, and the prediction must not say it does
FACTOR = 2.0       # prediction / measurement within [1/2, 2]: a noise band (1.3x seen) that a part's own speedup
#                    taken for the step's (fused AdamW 3-5x, bf16 matmuls 0.2-2x alone) falls outside of

ARITH_TOL = 0.10   # on a made-up profile: |prediction / the profile's own arithmetic - 1|; no noise, so only a wrong
#                    model misses (the narrowest such slip seen, batch2 read off the half-to-full step, is 12.5% off)

CHECKS: list[Check] = []  # fast_path alone; checks.py appends it to lab 7's, last
check = declare(CHECKS)

# Profiles of devices and steps this machine cannot show, in milliseconds (scaled to seconds, and each number moved a
# few per cent by a hidden variant). Each is chosen so that one of the slips above lands far from its arithmetic.
OTHER_DEVICES = {
    # tensor cores: bf16 matmuls 5x, the whole step under a millisecond (a slip that rounds to whole ms sees zeros)
    "gpu_sub_ms": dict(step_s=0.80, half_step_s=0.50, matmul_s=0.30, matmul_bf16_s=0.06, optimizer_s=0.25,
                       fused_optimizer_s=0.02),
    # no bf16 instructions: bf16 matmuls emulated, 2.3x slower than fp32 (a prediction that assumes bf16 is faster)
    "cpu_without_bf16": dict(step_s=50.0, half_step_s=27.0, matmul_s=35.0, matmul_bf16_s=80.0, optimizer_s=1.5,
                             fused_optimizer_s=0.5),
    # half the batch costs three quarters of the step: a fixed part of half the step (Python, launches, not only the
    # optimizer)
    "fixed_heavy": dict(step_s=40.0, half_step_s=30.0, matmul_s=10.0, matmul_bf16_s=6.0, optimizer_s=8.0,
                        fused_optimizer_s=1.0),
    # the optimizer's loop is half the step
    "optimizer_bound": dict(step_s=12.0, half_step_s=10.0, matmul_s=2.0, matmul_bf16_s=1.2, optimizer_s=6.0,
                            fused_optimizer_s=0.6),
}


def other_devices(variant: int) -> dict:
    """OTHER_DEVICES in seconds, each time moved by up to 4% (seeded by the variant), with the profile's other keys."""
    import random

    rng = random.Random(7919 * variant + 1)
    out = {}
    for name, ms in OTHER_DEVICES.items():
        p = {k: v * 1e-3 * (1 + 0.04 * rng.uniform(-1, 1)) if variant else v * 1e-3 for k, v in ms.items()}
        tokens = 64 if name == "gpu_sub_ms" else 1024
        p.update(tokens=tokens, flops=6e6 * tokens, ceiling_flops_s=6e6 * tokens / p["step_s"] / 0.4)
        out[name] = p
    return out


def arithmetic(p: dict, option: str) -> float:
    """The profile's own answer, written from the contract: the step with only the option's part replaced (Amdahl);
    batch2 per token, t(b) = F + T and t(b/2) = F + T/2. The made-up profiles keep 0 < F < t(b)."""
    s = p["step_s"]
    if option == "fused_adamw":
        return s / (s - p["optimizer_s"] + p["fused_optimizer_s"])
    if option == "bf16":
        return s / (s - p["matmul_s"] + p["matmul_bf16_s"])
    fixed = 2 * p["half_step_s"] - s
    return 2 * s / (fixed + 2 * (s - fixed))


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


def grade_runs(h, variant: int):
    """The measuring run, then the learner's predictions from its profiles."""
    # a run of the reference's: the learner tree's labs/__init__.py, which the core's import would run, is not run
    runs = {"fast_measure": h.run("fast_measure", "fast_measure", dict(variant=variant), budget_s=120,
                                  target="solutions")}
    if first_error(runs, "fast_measure") is None:
        # what the learner's function sees: the parts, not the shape (a rule keyed on the model's width is no model)
        profiles = {n: {k: v for k, v in r["profile"].items() if k != "shape"}
                    for n, r in runs["fast_measure"].result["shapes"].items()}
        others = other_devices(variant)
        runs["fast_predict"] = h.run("fast_predict", "fast_predict", dict(profiles={**profiles, **others}),
                                     budget_s=30)
        runs["fast_predict"].others = others  # the parent's own copy of what it asked: graded against it
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


def _parts(p: dict) -> str:
    return ", ".join(f"{k} {p[k] * 1e3:.3g} ms" for k in ("step_s", "half_step_s", "matmul_s", "matmul_bf16_s",
                                                          "optimizer_s", "fused_optimizer_s"))


@check("fast_path", "predict_speedup(profile, option) for fused AdamW, bf16 autocast and twice the micro-batch, "
       "from the checker's profile of a launch-bound and a compute-bound step, against each option measured "
       "(CPU time, interleaved): where the measurement is clear (>= 1.25x or <= 1.02x) the verdict agrees "
       "(pays: >= 1.10x), and every prediction is within 2x of the measurement; on four made-up profiles of "
       "other devices, within 10% of their parts' arithmetic",
       f"{WHERE}/fast.py predict_speedup: an option changes some parts of the step and leaves the others as they "
       "were; the profile measured each part alone, so the step's new time follows from which parts the option "
       "touches and what they become (checker hint lab7 fast.predict_speedup)",
       runs={"fast_measure", "fast_predict"})  # two runs in turn (grade_runs)
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
    measured, sent = runs["fast_measure"].result["shapes"], runs["fast_predict"].result.get("predicted")
    # what the learner's run sent, read as {profile: {option: float}} whatever it is (anything else: no prediction)
    predicted = {n: {o: v for o, v in row.items() if isinstance(v, float)} for n, row in sent.items()
                 if isinstance(row, dict)} if isinstance(sent, dict) else {}
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
    for name, p in getattr(runs["fast_predict"], "others", {}).items():
        for option in ("fused_adamw", "bf16", "batch2"):
            got, want = predicted.get(name, {}).get(option), arithmetic(p, option)
            if not (isinstance(got, float) and math.isfinite(got) and abs(got / want - 1) <= ARITH_TOL):
                shown = f"{got:.3f}x" if isinstance(got, float) else repr(got)
                wrong.append(f"{option} on a profile this machine cannot give ({name.replace('_', ' ')}: "
                             f"{_parts(p)}): predicted {shown}, its parts give {want:.3f}x "
                             f"({CLUES[(option, 'high' if isinstance(got, float) and got > want else 'low')]})")
    ok = not wrong
    msg = ("; ".join(wrong[:3]) + (f"; {len(wrong) - 3} more" if len(wrong) > 3 else "")) if wrong else \
        "predicted/measured: " + ", ".join(rows) + f"; {len(OTHER_DEVICES)} other devices' profiles: within " \
        f"{ARITH_TOL:.0%} of their arithmetic"
    return CheckResult(c.name, ok, value=len(wrong), threshold=0, unit=unit, message=msg, hint=c.hint)


def info(runs) -> list[tuple[str, str]]:
    """Each shape's step against this core's matmul ceiling: the MFU that cannot pass 100%."""
    run = runs.get("fast_measure")
    if run is None or first_error(runs, "fast_measure"):
        return []
    return [(f"fast path, {name}", f"{m['profile']['step_s'] * 1e3:.1f} ms CPU a step, {m['mfu']:.0%} of this "
             "core's fp32 matmul ceiling (attention FLOPs counted)") for name, m in run.result["shapes"].items()]
