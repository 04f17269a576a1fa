"""Lab 6's parent side: the runs a grade starts, in phases (the timed pipeline run alone, after the others), and what
they measured beside the checks."""
from __future__ import annotations

from checker.labs import _crosscheck
from checker.labs._common import Check, run_info, runs_needed
from checker.labs.lab6 import SEED, TIMING, WORLD_SIZE
from checker.labs.lab6.checks import CHECKS, ranks  # noqa: F401  (CHECKS: the parent side's)


def grade(h, checks: list[Check]) -> tuple[list, list]:
    need = runs_needed(checks)
    seed = SEED + h.variant  # hidden variants: other weights (the layouts and counts do not depend on them)
    # tp_comm alone (--only) needs no DTensor: skipping it saves importing DTensor's op tables (~2.5 s per rank)
    tp_parts = ["hand"] + (["dtensor"] if {c.name for c in checks} & {"tp_equivalence", "tp_memory"} else [])
    phases = [
        [dict(name="tp", task="tp", nproc=WORLD_SIZE, budget_s=60,
              args=dict(seed=seed, parts=tp_parts), crosscheck=True),
         dict(name="pp", task="pp", nproc=WORLD_SIZE, budget_s=90, args=dict(seed=seed), crosscheck=True)],
        [dict(name="pp_timing", task="pp_timing", nproc=WORLD_SIZE, budget_s=60)],
    ]
    runs = h.run_phases(phases, need)
    runs.update(_crosscheck.second_opinion(h, checks, runs, phases))  # what passed, judged by the reference
    return [c.evaluate(c, runs) for c in checks], info(runs)


def info(runs) -> list[tuple[str, str]]:
    rows = []
    rs, err = ranks(runs, "tp", "hand") if "tp" in runs else (None, True)
    if not err:
        r = rs[0]
        kb = 4 * r["activation_numel"] / 1024
        rows.append(("TP communication per step (by hand)", f"{r['fwd_calls'] + r['bwd_calls']} all-reduces of "
                                                            f"{kb:.0f} KB; the weights never move"))
    t = TIMING
    cost = f"{1e3 * t['forward_s']:.0f} ms forward + {1e3 * t['backward_s']:.0f} ms backward"
    rows.append(("pipeline timing stages", f"{cost} per micro-batch per stage (sleeps: the schedule is what is timed)"))
    return rows + run_info(runs)
