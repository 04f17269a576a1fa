"""Lab 7's parent side: the runs a grade starts, in phases (the fast path's alone, last: fast.grade_runs), and what
they measured beside the checks."""
from __future__ import annotations

from checker.labs import _crosscheck
from checker.labs._common import Check, run_info, runs_needed
from checker.labs.lab7 import WORLD_SIZE, fast  # noqa: F401  (WORLD_SIZE: the parent side's)
from checker.labs.lab7.checks import CHECKS  # noqa: F401  (the parent side's)
from checker.labs.lab7.setup import GROWTH_INTERVAL, SEED, SHAPES, timing_order
from checker.relay import Relay

GRADE_SECONDS = 60


def grade(h, checks: list[Check]) -> tuple[list, list]:
    need = runs_needed(checks)
    v = h.variant  # hidden variants: other batch and sequence lengths, other weights
    shapes = [(hh, a, b + v % 3 if b > 1 else b, s - 4 * (v % 4), p) for hh, a, b, s, p in SHAPES]  # b = 1 stays
    relay = Relay(timing_order("timing", "timing_ref"), cpu=True)  # recompute_cost: each side's CPU time, in turns
    phases = [
        [dict(name="memory", task="memory", args=dict(shapes=shapes, seed=SEED + v), budget_s=60, crosscheck=True),
         dict(name="amp", task="amp", args=dict(seed=SEED + v, growth_interval=GROWTH_INTERVAL + v % 2),
              budget_s=90, crosscheck=True),
         dict(name="fp8", task="fp8", args=dict(seed=SEED + v), budget_s=60, crosscheck=True)],
        # alone, timed in turns: the learner's full recomputation, and the step without it in a run of the
        # reference's that never imports the learner's code (checker/relay.py)
        [dict(name="timing", task="timing", args=dict(mode="full"), budget_s=60, relay=relay),
         dict(name="timing_ref", task="timing", target="solutions", args=dict(mode="none"), budget_s=60,
              relay=relay)],
    ]
    runs = h.run_phases(phases, need)
    if "fast_measure" in need:  # alone, after the rest: it times things
        runs.update(fast.grade_runs(h, v))
    runs.update(_crosscheck.second_opinion(h, checks, runs, phases))  # what passed, judged by the reference
    return [c.evaluate(c, runs) for c in checks], info(runs)


def info(runs) -> list[tuple[str, str]]:
    rows = [("GPU memory: NOT RUN", "the CUDA allocator's peak vs the prediction, a memory snapshot and "
             "expandable_segments are not graded; labs/lab7_memory/README.md, 'On a GPU', shows how to measure them"),
            ("FP8 on tensor cores: NOT RUN", "fp8 is graded here as a numerical emulation (torch's float8 dtypes on "
             "the CPU); fp8 matmul speed needs an H100/H200 (make gpu-check)")]
    return rows + fast.info(runs) + run_info(runs)
