# GENERATED from solutions/lab2_ddp/state.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Lab 1's checkpoint, for N ranks: what is replicated is written once, what differs per rank N times.

Replicated on every rank (that is DDP's invariant): weights, AdamW moments, scheduler, sampler
position (a global cursor), step -> rank 0 writes them, as `model.module`'s state dict so the
file loads into an unwrapped model too. Different on every rank: the RNG streams (each rank
draws its own dropout masks) -> each rank writes its own small file.
Order matters: every rank writes its RNG file *for this step*, a barrier, then rank 0 writes the
main file last, atomically, then each rank removes its RNG files of other steps. A kill at any
point leaves a main file whose RNG files all exist: the main file names the step, the step names them.
"""
from __future__ import annotations

from pathlib import Path

import torch.distributed as dist

from labs.common import checkpoint as ckpt


def rng_path(path, rank: int, step: int) -> Path:
    path = Path(path)
    return path.with_name(f"{path.stem}.rng-rank{rank}-step{step}{path.suffix}")


def save_checkpoint(path, model, optimizer, scheduler, sampler, step: int) -> None:
    """Every rank calls this. `model` is the DDP wrapper (its .module is the GPT)."""
    raise NotImplementedError("TODO(lab2): each rank atomic_saves its rng_state() to rng_path(path, rank, step); "
                              "barrier; rank 0 atomic_saves model.module, optimizer, scheduler, sampler state dicts "
                              "and the step to path; barrier; each rank deletes its RNG files of other steps")


def load_checkpoint(path, model, optimizer, scheduler, sampler) -> int:
    """Every rank calls this; returns the step to continue from."""
    raise NotImplementedError("TODO(lab2): every rank loads the main file into model.module, optimizer, scheduler, "
                              "sampler, then its own RNG file for that step; return the step")
