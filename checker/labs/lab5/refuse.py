"""resume's refusal of a checkpoint written at another world size, exercised in-process.

The preempted Slurm job always comes back at the world size it left, so it never asks resume to refuse anything.
Here the checker asks it: 2 ranks save a real checkpoint with the learner's lab 2 save_checkpoint (one main file
and one RNG file per rank), then rank 0 alone, in a process group of 1, calls the learner's resume on it. Lab 2's
per-rank RNG streams and the sampler's shard belong to 2 ranks: a 1-rank run that loads them silently trains on
another data order and other dropout masks than the run it claims to continue. resume must raise, on purpose
(NotImplementedError is a TODO, not a refusal). Cost: one tiny model built and saved, ~1 s.
"""
from __future__ import annotations

import importlib

SAVED_AT = 3  # the step written into the checkpoint: a resume that loads it returns 3


def save_then_resume_alone(ctx, seam, target: str, env) -> dict | None:
    """Every rank of the live 2-rank group saves; the group is torn down; rank 0 resumes in a group of 1.
    Returns rank 0's verdict ({"raised": {...}} or {"returned": step}); None on the other ranks."""
    import torch.distributed as dist

    from labs.common import dist as cdist

    path = ctx.workdir / "other-world-size" / "ckpt.pt"
    path.parent.mkdir(exist_ok=True)
    lab2 = importlib.import_module(f"{target}.lab2_ddp")
    ddp, optimizer, scheduler, sampler = _objects(lab2, env.rank, env.world_size, env.device)
    lab2.save_checkpoint(path, ddp, optimizer, scheduler, sampler, SAVED_AT)
    cdist.teardown()
    if env.rank != 0:
        return None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp, optimizer, scheduler, sampler = _objects(lab2, 0, 1, env.device)
        step, err = ctx.attempt(lambda: seam.resume(path, 1, ddp, optimizer, scheduler, sampler))
    finally:
        dist.destroy_process_group()
    return {"raised": err} if err else {"returned": step}


def _objects(lab2, rank: int, world_size: int, device):
    from labs.common.model import build_model, get_config
    from labs.common.optim import make_optimizer, make_scheduler

    ddp = lab2.make_torch_ddp(build_model(get_config("tiny")).to(device), device)
    optimizer = make_optimizer(ddp, lr=1e-3)
    return (ddp, optimizer, make_scheduler(optimizer, warmup=2, total=10),
            lab2.ShardedSampler(1024, 4, rank, world_size, seed=0))


def verdict(refusal: dict | None) -> str | None:
    """Why resume did not refuse the 2-rank checkpoint at 1 rank (a failure message), or None."""
    if refusal is None:
        return "resume at another world size: rank 0 reported nothing (see the flag run's log, grade -v)"
    err = refusal.get("raised")
    if err is None:
        return (f"resume loaded a checkpoint written by 2 ranks into a run of 1 and returned step "
                f"{refusal.get('returned')}: per-rank RNG streams and the sampler's shard of 2 ranks do not fit 1, "
                "and the run would go on with another data order while claiming to continue. Compare the "
                "checkpoint's world size with dist.get_world_size() and raise, naming both (restart.py)")
    if err.get("todo") or err.get("type") == "NotImplementedError":
        return f"resume at another world size: not written yet: {err.get('todo') or err.get('message', '')}"
    return None
