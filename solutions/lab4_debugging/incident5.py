"""Incident 5 — "After the node was preempted and the job resumed, the loss jumped and took hours to recover."

Reproduce (the script trains, is killed after a checkpoint, resumes, and compares with a run that
was never interrupted), diagnose, fix the two functions below:

    python -m labs.lab4_debugging.run 5
"""
from __future__ import annotations

from pathlib import Path

import torch  # noqa: F401 (the team's version below uses it)
import torch.distributed as dist

from labs.common import checkpoint as ckpt


def _rng_path(path, rank: int, step: int) -> Path:
    return Path(f"{path}.rng-rank{rank}-step{step}")


def save_checkpoint(path, ddp, optimizer, step: int) -> None:
    """Every rank calls this after optimizer step `step`."""
    # BEGIN SOLUTION After it returns on every rank, the checkpoint at path holds all that the next step reads: the
    #                weights, the optimizer's full state and the step, plus every rank's RNG state; a kill at any
    #                moment of the save leaves the previous checkpoint whole, its main file naming a step whose RNG
    #                files all exist. A resumed run is bit-identical.
    # HINT 1         Read the line logged right after the resume, and compare the resumed losses with the uninterrupted
    #                run's. Besides the weights, what does an AdamW step read, and what decides each rank's dropout
    #                masks?
    # HINT 2         save_checkpoint saves the weights and the step only: AdamW's two moments per parameter (8 B/param,
    #                twice the weights) and the ranks' RNG states are lost, so the resumed steps start from zero
    #                moments.
    # HINT 3         Each rank writes ckpt.rng_state() to _rng_path(path, rank, step) with ckpt.atomic_save; barrier;
    #                rank 0 atomic_saves {"model": ..., "optimizer": optimizer.state_dict(), "step": step} to path;
    #                barrier; each rank unlinks its RNG file of the step before, if any.
    # Resuming exactly needs everything the next step reads: weights, AdamW's two moments per parameter
    # (2 x 4 B/param, twice the weights; without them the first steps after resume take full-size
    # Adam steps from zero moments: the loss jumps), the step, and each rank's RNG (dropout masks).
    # RNG files first, named by their step, then rank 0 writes the main file atomically: it names a step whose RNG
    # files exist, and a kill while it is written leaves the previous main file with the previous step's RNG files.
    rank = dist.get_rank()
    ckpt.atomic_save(ckpt.rng_state(), _rng_path(path, rank, step))
    dist.barrier()
    if rank == 0:
        ckpt.atomic_save({"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)
    dist.barrier()
    for old in Path(path).parent.glob(f"{Path(path).name}.rng-rank{rank}-step*"):
        if old != _rng_path(path, rank, step):
            old.unlink()
    # STARTER
    # if dist.get_rank() == 0:  # the weights are the same on every rank: save them once
    #     torch.save({"model": ddp.module.state_dict(), "step": step}, path)
    # dist.barrier()
    # END SOLUTION


def load_checkpoint(path, ddp, optimizer) -> int:
    """Every rank calls this before training; returns the last completed step."""
    # BEGIN SOLUTION On every rank, the model's weights, the optimizer's full state and this rank's RNG state become
    #                those saved, and the saved step is returned: the next step computes exactly what the uninterrupted
    #                run computed at that step.
    # HINT 1         The resume line says how many parameters the optimizer holds state for. What should that number be,
    #                and what else must come back for the next step's dropout masks to match the uninterrupted run's?
    # HINT 2         load_checkpoint restores only the weights: the optimizer and the RNG stay as a fresh start has
    #                them.
    # HINT 3         ckpt.load the main file; load the model's and the optimizer's state dicts from it; then
    #                ckpt.set_rng_state(ckpt.load(_rng_path(path, rank, state["step"]))); return the step.
    state = ckpt.load(path)
    ddp.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    ckpt.set_rng_state(ckpt.load(_rng_path(path, dist.get_rank(), state["step"])))
    return state["step"]
    # STARTER
    # state = torch.load(path)
    # ddp.module.load_state_dict(state["model"])
    # return state["step"]
    # END SOLUTION
