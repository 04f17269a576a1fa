"""Lab 2's parent side: the runs a grade starts, in phases (what may share the machine, what must run alone),
and what they measured beside the checks."""
from __future__ import annotations

from checker.labs import _crosscheck
from checker.labs._common import Check, run_info, runs_needed
from checker.labs.lab2 import N_STEPS, SAVE_AT, WORLD_SIZE, throughput_order
from checker.labs.lab2.checks import CHECKS, overlap_fractions  # noqa: F401  (CHECKS: the parent side's)
from checker.relay import Relay


def grade(h, checks: list[Check]) -> tuple[list, list]:
    need = runs_needed(checks)
    # the second killed run's checkpoint in a folder of its own: a save that removes files by a pattern removes none
    # of the first's
    (h.workdir / "after").mkdir(exist_ok=True)
    ckpt, ckpt_after = str(h.workdir / "ckpt.pt"), str(h.workdir / "after" / "ckpt.pt")
    v = h.variant  # hidden variants: other seeds, data order, kill step; odd ones check the wrappers on 3 ranks
    seed, save_at, ranks = 7 + v, SAVE_AT + v % 5, 3 if v % 2 else WORLD_SIZE
    common = dict(steps=N_STEPS, data_seed=v)
    relay = Relay(throughput_order("throughput", "throughput_torch"))
    phases = [
        [dict(name="correctness", task="correctness", nproc=ranks, budget_s=90, crosscheck=True),
         dict(name="sharding", task="sharding", budget_s=60),
         # the reference in runs of its own, which never import the learner's code (checker/reach.py)
         dict(name="sharding_ref", task="sharding_ref", target="solutions", budget_s=60)],
        [dict(name="full", task="train", nproc=2, budget_s=90, args=dict(seed=seed, **common), crosscheck=True),
         dict(name="resume_1", task="train", nproc=2, budget_s=90, kill_on="saved",
              args=dict(seed=seed, save_at=save_at, ckpt=ckpt, **common)),
         # the other kill point: the weights' file complete, the kill inside the next write
         dict(name="after_1", task="train", nproc=2, budget_s=90, kill_on="saved_after",
              args=dict(seed=seed, save_at=save_at, ckpt=ckpt_after, after_weights=True, **common))],
        [dict(name="resume_2", task="train", nproc=2, budget_s=90,
              args=dict(seed=seed + 777, resume=True, ckpt=ckpt, **common)),
         dict(name="after_2", task="train", nproc=2, budget_s=90,
              args=dict(seed=seed + 777, resume=True, ckpt=ckpt_after, **common)),
         dict(name="step", task="step", nproc=2, budget_s=90, args=dict(seed=seed))],  # neither is timed
        [dict(name="step_ref", task="step_ref", target="solutions", nproc=2, budget_s=90, args=dict(seed=seed))],
        # alone, timed in turns: the learner's BucketedDDP and torch's DDP each in a run of its own, torch's in one
        # that never imports the learner's code (checker/relay.py)
        [dict(name="throughput", task="throughput", nproc=2, budget_s=120, relay=relay),
         dict(name="throughput_torch", task="throughput_torch", target="solutions", nproc=2, budget_s=120,
              relay=relay)],
    ]
    runs = h.run_phases(phases, need)
    runs.update(_crosscheck.second_opinion(h, checks, runs, phases))  # what passed, judged by the reference
    return [c.evaluate(c, runs) for c in checks], info(runs)


def info(runs) -> list[tuple[str, str]]:
    rows, frac = [], overlap_fractions(runs)
    if frac:
        rows.append(("communication overlap (all-reduce time hidden behind backward / all all-reduce time)",
                     ", ".join(f"{k} {v['fraction']:.0%}" for k, v in frac.items())))
        rows.append(("exposed communication per step (backward end -> gradients averaged, slowest rank)",
                     ", ".join(f"{k} {v['exposed_ms']:.1f} ms" for k, v in frac.items())))
    utils = [(what, [r.get("cpu_util") for r in run.results]) for what, run in
             (("bucketed", runs.get("throughput")), ("torch DDP", runs.get("throughput_torch"))) if run]
    if utils and all(u is not None for _, us in utils for u in us):
        rows.append(("CPU utilisation per rank over the timed windows (throughput runs)",
                     "; ".join(f"{what}: " + ", ".join(f"rank {i} {u:.0%}" for i, u in enumerate(us))
                               for what, us in utils)))
    return rows + run_info(runs)
