"""Lab 9's parent side: the runs a grade starts (hidden variants move their shapes, seeds and world sizes), how many
ranks each check's runs take (make gpu-check), and what was not graded here."""
from __future__ import annotations

from checker.labs import _crosscheck
from checker.labs._common import Check, run_info, runs_needed
from checker.labs.lab9 import WORLD_SIZE  # noqa: F401  (the parent side's)
from checker.labs.lab9.checks import CHECKS, resume_decided
from checker.labs.lab9.shapes import CP, FLASH_CASES, KILL, MEM_SHAPE, RESUME, RING, SEED, ULYSSES

GRADE_SECONDS = 60


def world_size(variant: int) -> int:
    # 3 ranks in the public grade: with 2 the next rank and the previous one are the same, and dK, dV sent the
    # wrong way round the ring would still arrive; hidden variants: 2 ranks on odd ones
    return 3 - variant % 2


def ranks_needed(check: str, variant: int = 0) -> int:
    """The most ranks any run of `check` takes at this variant (make gpu-check: which checks fit the GPUs)."""
    size = {"flash": 1, "ring": world_size(variant), "ulysses": world_size(variant), "cp": CP["dp"] * CP["cp"],
            **{name: RESUME["dp"] * RESUME["cp"] for name in ("cp_full", "cp_killed", "cp_resumed")}}
    return max(size[run] for run in next(c for c in CHECKS if c.name == check).runs)


def resume_specs(h, variant: int, seed: int) -> list[list[dict]]:
    """The phases of the resume check (resume.py's task): the uninterrupted job beside the killed one, then the
    resumed one."""
    ckpt = str(h.workdir / "cp_ckpt" / "state.pt")
    (h.workdir / "cp_ckpt").mkdir(exist_ok=True)
    shift = variant % 3  # hidden variants move the save, the kill and the data
    save_at, kill_at = RESUME["save_at"] + shift, RESUME["kill_at"] + shift
    common = dict(ckpt=ckpt, seed=seed + variant, steps=RESUME["steps"] + shift)
    return [[dict(name="cp_full", task="cp_train", nproc=4, budget_s=60, args=common),
             dict(name="cp_killed", task="cp_train", nproc=4, budget_s=60, kill_on=KILL,
                  args=dict(common, save_at=save_at, kill_at=kill_at))],
            [dict(name="cp_resumed", task="cp_train", nproc=4, budget_s=60, args=dict(common, resume=True))]]


def grade(h, checks: list[Check]) -> tuple[list, list]:
    need = runs_needed(checks)
    v = h.variant  # hidden variants: other sequence lengths and chunk sizes, other tensors, other world sizes
    cases = [[b, hh, s + 2 * (v % 5), d, c, bq, bk] for b, hh, s, d, c, bq, bk in FLASH_CASES]
    b, hh, s, d, tile = MEM_SHAPE
    mem = [b, hh, s + 16 * (v % 3), d, tile]
    n = world_size(v)
    ring = dict(RING, chunk=RING["chunk"] + v % 3)
    ulysses = dict(ULYSSES, rows=ULYSSES["rows"] + v % 3)
    resume_first, resume_then = resume_specs(h, v, SEED)
    first = [
        [dict(name="flash", task="flash", args=dict(cases=cases, mem=mem, seed=SEED + v), budget_s=60, crosscheck=True),
         dict(name="ring", task="ring", nproc=n, args=dict(ring=ring, seed=SEED + v), budget_s=60, crosscheck=True),
         dict(name="ulysses", task="ulysses", nproc=n, args=dict(ulysses=ulysses, seed=SEED + v), budget_s=60,
              crosscheck=True),
         dict(name="cp", task="cp", nproc=CP["dp"] * CP["cp"], args=dict(seed=SEED + v), budget_s=60, crosscheck=True),
         *resume_first]]
    runs = h.run_phases(first, need, parallel=3)
    if "cp_resumed" in need and resume_decided(runs) is None:  # fresh processes, after the kill
        runs.update(h.run_phases([resume_then], need))
    runs.update(_crosscheck.second_opinion(h, checks, runs, first))  # what passed, judged by the reference
    return [c.evaluate(c, runs) for c in checks], info(runs)


def info(runs) -> list[tuple[str, str]]:
    return [("GPU kernels: NOT RUN", "torch's context_parallel (CUDA attention kernels only) is not graded here; "
             "labs/lab9_long_context/README.md shows how to run it on a GPU node")] + run_info(runs)
