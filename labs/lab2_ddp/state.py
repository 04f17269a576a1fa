# GENERATED from solutions/lab2_ddp/state.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Lab 1's checkpoint, for N ranks: what is replicated is written once, what differs per rank N times.

Where things live: `path` holds what every rank holds alike, once, with the model as `model.module`'s state
dict (so the file loads into an unwrapped model too); each rank's own RNG streams (each rank draws its own
dropout masks) live in rng_path(path, rank, step), the step being the one the main file names.
What must hold at every instant, wherever a kill lands (the checker kills a save inside one of its writes):
  - the main file on disk, if any, is a whole one (this save's or an earlier save's), never a torn one;
  - every rank's RNG file for the step the main file on disk names exists, complete;
  - once a save has returned on every rank, no rank's RNG file of another step remains.
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
    raise NotImplementedError("TODO(lab2): Every rank calls it. Afterwards path holds what is replicated, written "
                              "once: the unwrapped model's weights (so it loads without the wrapper), optimizer, "
                              "scheduler, sampler, step; and each rank's own RNG streams sit in a file per rank named "
                              "by the step. A kill at any moment leaves a complete main file (this save's or the last "
                              "one's) whose RNG files all exist, and no rank's RNG file of another step outlives a "
                              "completed save. (hints: checker hint lab2 state.save_checkpoint)")


def load_checkpoint(path, model, optimizer, scheduler, sampler) -> int:
    """Every rank calls this; returns the step to continue from."""
    raise NotImplementedError("TODO(lab2): Every rank calls it, on freshly built, differently seeded objects. "
                              "Afterwards each rank holds the replicated state from the main file and its own RNG "
                              "streams (not rank 0's: its dropout masks differ) for the step the main file names; "
                              "returns that step, and every rank's next step is bit-identical to the uninterrupted "
                              "run's. (hints: checker hint lab2 state.load_checkpoint)")
