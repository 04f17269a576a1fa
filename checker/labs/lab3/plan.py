"""Lab 3's parent side: the runs a grade starts, in phases, and what they measured beside the checks."""
from __future__ import annotations

from checker.labs import _crosscheck
from checker.labs._common import Check, run_info, runs_needed
from checker.labs._windows import medians
from checker.labs.lab3 import (
    DROPOUT,
    N_STEPS,
    RESHARD_STEPS,
    SAVE_AT,
    WORLD_SIZE,
    speed_order,
)
from checker.labs.lab3.checks import CHECKS, speed_pairs  # noqa: F401  (the parent side's)
from checker.relay import Relay


def grade(h, checks: list[Check]) -> tuple[list, list]:
    need = runs_needed(checks)
    ckpt = str(h.workdir / "ckpt")
    save_at = SAVE_AT + h.variant % 4  # hidden variants move the kill step
    # and odd ones run the correctness run on 3 ranks: tiny's tensors deal out otherwise, toy's one tensor of 31 leaves
    # two ranks owning no parameter, and each flat buffer pads to another multiple
    ranks = 3 if h.variant % 2 else WORLD_SIZE
    relay = Relay(speed_order("speed", "speed_ddp"))
    phases = [
        [dict(name="correctness", task="correctness", nproc=ranks, budget_s=90, crosscheck=True),
         dict(name="deepspeed", task="deepspeed", nproc=2, budget_s=120, crosscheck=True)],
        # the speed ratios: each side in a process group of its own, alone on the machine, timed in turns; torch DDP
        # in a run of the reference's server, which never imports the learner's code (checker/relay.py)
        [dict(name="speed", task="speed", nproc=2, budget_s=120, args=dict(side="learner"), relay=relay),
         dict(name="speed_ddp", task="speed", nproc=2, budget_s=120, args=dict(side="ddp"), target="solutions",
              relay=relay)],
        # dropout on: the same-world-size resume must replay every rank's masks (each rank's RNG state)
        [dict(name="full", task="train", nproc=2, budget_s=90, args=dict(steps=N_STEPS, dropout=DROPOUT),
              crosscheck=True),
         dict(name="resume_1", task="train", nproc=2, budget_s=90, kill_on="saved",
              args=dict(steps=N_STEPS, save_at=save_at, ckpt=ckpt, dropout=DROPOUT))],
        [dict(name="resume_2", task="train", nproc=2, budget_s=90,
              args=dict(steps=N_STEPS, resume=True, ckpt=ckpt, dropout=DROPOUT)),
         # dropout off: the same checkpoint resumed at 4 ranks (the job grew: ranks 2 and 3 have no RNG file) and
         # at 1 must give the same losses (masks drawn on another number of ranks could never match)
         # (RESHARD_STEPS steps each: resharding errors show in the first steps)
         dict(name="resume_grow", task="train", nproc=4, budget_s=90, args=dict(steps=save_at + RESHARD_STEPS,
                                                                                resume=True, ckpt=ckpt)),
         dict(name="resume_ws1", task="train", nproc=1, group=True, budget_s=90,
              args=dict(steps=save_at + RESHARD_STEPS, resume=True, ckpt=ckpt, resave=str(h.workdir / "resave")))],
    ]
    runs = h.run_phases(phases, need)
    runs.update(_crosscheck.second_opinion(h, checks, runs, phases))  # what passed, judged by the reference
    return [c.evaluate(c, runs) for c in checks], info(runs)


def info(runs) -> list[tuple[str, str]]:
    """MFU and CPU utilisation of the speed runs' windows: information, not graded."""
    rows = []
    pairs, _ = speed_pairs(runs)
    parts = [r.get("speed") for r in (runs["speed"].results if pairs else [])]
    if pairs and all(isinstance(x, dict) for x in parts) and parts[0].get("peak_flops"):
        r = parts[0]
        tps = {k: v for name, ps in pairs.items()
               for k, v in ((name, medians({0: [m for m, _ in ps]})[0]),
                            (f"ddp at {name}'s size", medians({0: [d for _, d in ps]})[0]))}
        per_rank = {k: v / r["world_size"] * r["flops_per_token"] for k, v in tps.items()}
        rows.append(("MFU per rank (tiny; achieved / peak FLOP/s)", ", ".join(
            f"{k} {v / r['peak_flops']:.1%}" for k, v in per_rank.items())
            + f" of {r['peak_flops'] / 1e9:.1f} GFLOP/s"))
        rows.append(("CPU utilisation per rank (your FSDP2 and ZeRO-2 windows)",
                     ", ".join(f"rank {i} {x['cpu_util']:.0%}" for i, x in enumerate(parts))))
    return rows + run_info(runs)
