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
    # BEGIN SOLUTION Every rank calls it. Afterwards path holds what is replicated, written once: the unwrapped model's
    #                weights (so it loads without the wrapper), optimizer, scheduler, sampler, step; and each rank's own
    #                RNG streams sit in a file per rank named by the step. A kill at any moment leaves a complete main
    #                file (this save's or the last one's) whose RNG files all exist, and no rank's RNG file of another
    #                step outlives a completed save.
    # HINT 1         After N steps of DDP, what is identical on every rank and what differs? Replicated state written N
    #                times is N - 1 wasted copies; per-rank state written once is lost. In which order must files appear
    #                so a kill between any two writes still leaves a consistent checkpoint?
    # HINT 2         rng_path(path, rank, step) names a rank's file; ckpt.atomic_save for every write; dist.barrier
    #                between the phases; rank 0 alone writes the main file (model.module's state dict and the others');
    #                a glob over the stem finds stale RNG files.
    # HINT 3         each rank: ckpt.atomic_save({'rng': ckpt.rng_state(), 'step': step}, rng_path(path, rank, step));
    #                barrier; rank 0: atomic_save of model.module, optimizer, scheduler, sampler state dicts, step and
    #                world size to path; barrier; each rank unlinks its RNG files of other steps.
    # Every rank writes its RNG file for this step, a barrier, then rank 0 writes the main file last, atomically,
    # then each rank removes its RNG files of other steps.
    rank = dist.get_rank()
    mine = rng_path(path, rank, step)
    ckpt.atomic_save({"rng": ckpt.rng_state(), "step": step}, mine)
    dist.barrier()
    if rank == 0:
        ckpt.atomic_save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                          "scheduler": scheduler.state_dict(), "sampler": sampler.state_dict(),
                          "step": step, "world_size": dist.get_world_size()}, path)
    dist.barrier()
    for old in Path(path).parent.glob(f"{Path(path).stem}.rng-rank{rank}-step*{Path(path).suffix}"):
        if old != mine:
            old.unlink()
    # END SOLUTION


def load_checkpoint(path, model, optimizer, scheduler, sampler) -> int:
    """Every rank calls this; returns the step to continue from."""
    # BEGIN SOLUTION Every rank calls it, on freshly built, differently seeded objects. Afterwards each rank holds the
    #                replicated state from the main file and its own RNG streams (not rank 0's: its dropout masks
    #                differ) for the step the main file names; returns that step, and every rank's next step is
    #                bit-identical to the uninterrupted run's.
    # HINT 1         Which files does each rank need? The main file is the one known to be complete: how does a rank
    #                find its own RNG file for exactly that step?
    # HINT 2         ckpt.load the main file; load_state_dict into model.module (the file holds the unwrapped model's
    #                keys), the optimizer, scheduler and sampler; then ckpt.set_rng_state from this rank's rng_path for
    #                the saved step.
    # HINT 3         state = ckpt.load(path); model.module.load_state_dict(state['model']); the optimizer, scheduler,
    #                sampler likewise; ckpt.set_rng_state(ckpt.load(rng_path(path, dist.get_rank(),
    #                state['step']))['rng']); return state['step'].
    state = ckpt.load(path)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    ckpt.set_rng_state(ckpt.load(rng_path(path, dist.get_rank(), state["step"]))["rng"])
    return state["step"]
    # END SOLUTION
