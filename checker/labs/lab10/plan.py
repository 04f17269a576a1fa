"""Lab 10's parent side: the runs a grade starts (hidden variants move their shapes, seeds and world sizes), and how
many ranks each check's runs take (make gpu-check). Its runs take 1 to 4 ranks each; the lab declares no WORLD_SIZE,
so `checker list` and --nproc see the checker's default, 1."""
from __future__ import annotations

from checker.labs import _crosscheck
from checker.labs._common import Check, run_info, runs_needed
from checker.labs.lab10.checks import CHECKS
from checker.labs.lab10.shapes import BALANCE, CAPACITY_CASES, EP, EPDP, MOE, RESUME, ROUTER_CASES, SEED

GRADE_SECONDS = 60


def world_size(variant: int) -> int:
    # 3 ranks in the public grade (a rank's own experts, and two peers whose splits differ); 2 on odd variants
    return 3 - variant % 2


def ranks_needed(check: str, variant: int = 0) -> int:
    """The most ranks any run of `check` takes at this variant (make gpu-check: which checks fit the GPUs)."""
    size = {"units": 1, "ep": world_size(variant), "epdp": EPDP["dp"] * EPDP["ep"], "full": 2, "resume_1": 2,
            "resume_2": 2}
    return max(size[run] for run in next(c for c in CHECKS if c.name == check).runs)


def grade(h, checks: list[Check]) -> tuple[list, list]:
    need = runs_needed(checks)
    v = h.variant  # hidden variants: other token and expert counts, k, capacity factors, world sizes, tensors
    factor = (1.0, 1.25, 0.75)[v % 3]
    router = [[t + v % 5, e, k] for t, e, k in ROUTER_CASES]
    moe = dict(MOE, experts=MOE["experts"] + v % 3, seq=MOE["seq"] + v % 4, factor=factor)
    ep = dict(EP, tokens=EP["tokens"] + 3 * (v % 4), per_rank_experts=EP["per_rank_experts"] + v % 2, factor=factor)
    epdp = dict(EPDP, k=1 + (v + 1) % 2)
    n = world_size(v)
    ckpt = str(h.workdir / "ckpt")
    resume = dict(RESUME, experts=RESUME["experts"] + 2 * (v % 2))
    save_at = RESUME["save_at"] - 1 + v % 3  # hidden variants move the kill step
    phases = [
        [dict(name="units", task="units", args=dict(seed=SEED + v, router=router, cap_cases=CAPACITY_CASES, moe=moe,
                                                    balance=BALANCE, resume=resume), budget_s=60, crosscheck=True),
         dict(name="ep", task="ep", nproc=n, args=dict(ep=ep, seed=SEED + v), budget_s=60, crosscheck=True),
         dict(name="epdp", task="epdp", nproc=EPDP["dp"] * EPDP["ep"], args=dict(epdp=epdp, seed=SEED + v),
              budget_s=60, crosscheck=True),
         dict(name="full", task="train", nproc=2, args=dict(run=resume, seed=SEED + v, mark=save_at), budget_s=60),
         dict(name="resume_1", task="train", nproc=2, kill_on="saved", budget_s=60,
              args=dict(run=resume, seed=SEED + v, save_at=save_at, ckpt=ckpt))],
        [dict(name="resume_2", task="train", nproc=2, budget_s=60,
              args=dict(run=resume, seed=SEED + v, ckpt=ckpt, resume=True))],
    ]
    runs = h.run_phases(phases, need, parallel=3)
    runs.update(_crosscheck.second_opinion(h, checks, runs, phases))  # what passed, judged by the reference
    return [c.evaluate(c, runs) for c in checks], info(runs)


def info(runs) -> list[tuple[str, str]]:
    return run_info(runs)
