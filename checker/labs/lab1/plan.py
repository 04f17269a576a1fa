"""Lab 1's parent side: the runs a grade starts, in phases (what may share the machine, what must run alone),
and what they measured beside the checks."""
from __future__ import annotations

from checker.labs import _crosscheck
from checker.labs._common import Check, profile_info, run_info, runs_needed
from checker.labs._windows import medians
from checker.labs.lab1 import WORLD_SIZE  # noqa: F401  (the parent side's)
from checker.labs.lab1.checks import CHECKS  # noqa: F401  (the parent side's)
from checker.labs.lab1.setup import DATA_SEED, N_STEPS, SAVE_AT, SEED, speed_order
from checker.relay import Relay, turn_rates


def grade(h, checks: list[Check]) -> tuple[list, list]:
    need = runs_needed(checks)
    v = h.variant  # hidden variants move the seed, the data order and the kill step
    seed, data_seed, save_at = SEED + 7919 * v, DATA_SEED + v, SAVE_AT + (13 * v) % 30
    common = dict(steps=N_STEPS, data_seed=data_seed)
    ckpt = str(h.workdir / "ckpt.pt")
    relay = Relay(speed_order("speed", "speed_ref"))
    phases = [
        [dict(name="run_a", task="train", args=dict(seed=seed, evaluate=True, **common), budget_s=60, crosscheck=True),
         dict(name="run_b", task="train", args=dict(seed=seed, other_seed=seed + 1, **common), budget_s=60),
         dict(name="resume_1", task="train", budget_s=60, kill_on="saved",
              args=dict(seed=seed, save_at=save_at, ckpt=ckpt, **common))],
        # a different seed first: only what the checkpoint restores may matter
        [dict(name="resume_2", task="train", args=dict(seed=seed + 777, resume=True, ckpt=ckpt, **common), budget_s=60),
         dict(name="step", task="step", args=dict(seed=seed), budget_s=60),
         dict(name="memory", task="memory", args={}, budget_s=60, crosscheck=True)],
        # the reference in runs of its own, which never import the learner's code (checker/relay.py)
        [dict(name="step_ref", task="step_ref", target="solutions", args=dict(seed=seed), budget_s=60)],
        [dict(name="speed", task="speed", args=dict(seed=seed), budget_s=90, relay=relay),  # alone: timed in turns
         dict(name="speed_ref", task="speed", target="solutions", args=dict(seed=seed), budget_s=90, relay=relay)],
        [dict(name="measure", task="measure", args={}, budget_s=90)],  # alone: it times things
        [dict(name="pipeline", task="pipeline", args={}, budget_s=60)],  # alone: its workers need the other core
    ]
    runs = h.run_phases(phases, need)
    runs.update(_crosscheck.second_opinion(h, checks, runs, phases))  # what passed, judged by the reference
    return [c.evaluate(c, runs) for c in checks], info(runs)


def info(runs) -> list[tuple[str, str]]:
    m, p = runs.get("measure"), runs.get("pipeline")
    rows = []
    s, sr = runs.get("speed"), runs.get("speed_ref")
    if s and sr and s.result.get("tokens") and sr.result.get("tokens"):
        rates, _ = turn_rates(s.relay, {"speed": s.result["tokens"], "speed_ref": sr.result["tokens"]})
        if rates:
            rows.append(("reference tokens/s (tiny, 1 thread)", f"{medians(rates)['speed_ref']:,.0f}"))
    rows += profile_info("the checker's plain step, its profiler", m.result.get("profile")) if m else []
    if p and p.result.get("learner"):
        rows.append(("input stall", f"your loader {p.result['learner']['stall']:.1%}, in-process pipeline "
                                    f"{p.result['baseline']['stall']:.1%}"))
    return rows + run_info(runs)
