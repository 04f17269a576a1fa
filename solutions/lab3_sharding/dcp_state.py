"""Sharded checkpoints with torch.distributed.checkpoint (DCP): every rank writes only its shards.

A DCP checkpoint is a folder: one file per rank with that rank's shards, plus a metadata file
that records each tensor's global shape and which slice lives where. Loading asks for the slices
the *loading* layout needs, so a checkpoint saved by 2 ranks loads into 1, 3 or 4 ranks
(resharding) — a full-state checkpoint (lab 1) would need one rank to hold everything.

Layout on disk (a folder under its final name is complete; latest names only complete folders):
    ckpt/step-000006/          DCP files (__0_0.distcp, __1_0.distcp, .metadata)
    ckpt/step-000006/rng-rank0.pt ...   per-rank RNG (ranks draw different dropout masks)
    ckpt/latest                "step-000006": the newest complete folder
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful

from labs.common import checkpoint as ckpt


class TrainState(Stateful):
    """What DCP saves and loads: model and optimizer (sharded), scheduler, sampler, step (replicated)."""

    def __init__(self, model, optimizer, scheduler, sampler, step: int = 0):
        self.model, self.optimizer, self.scheduler, self.sampler, self.step = model, optimizer, scheduler, sampler, step

    def state_dict(self) -> dict:
        # BEGIN SOLUTION Returns everything a resume reads, under keys the load side reads back: the model's and the
        #                optimizer's state as this rank's shards keyed by fully qualified parameter names (not by
        #                position, so N ranks' checkpoint loads into any number), plus the scheduler's and sampler's
        #                state and the step, the same on every rank.
        # HINT 1         An optimizer's own state is keyed by parameter position and in whatever layout this run has.
        #                What makes a state portable across world sizes? Which parts are sharded, which plain values?
        # HINT 2         get_state_dict(model, optimizer) returns the sharded model and optimizer dicts; the scheduler
        #                and the sampler each have a state_dict of their own; the step is an int.
        # HINT 3         get_state_dict(model, optimizer) gives DTensor-sharded dicts with fully qualified names; add
        #                scheduler, sampler and step.
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, "scheduler": self.scheduler.state_dict(),
                "sampler": self.sampler.state_dict(), "step": self.step}
        # END SOLUTION

    def load_state_dict(self, state: dict) -> None:
        # BEGIN SOLUTION Afterwards the model's and the optimizer's shards, the scheduler, the sampler and the step are
        #                those in `state` (the dict your save side returned, its tensors filled in by the loader in
        #                this rank's layout), so the next step is the one the saved run would have taken.
        # HINT 1         The loader has already put this rank's slices into your dict. What is left is handing each
        #                part back to its owner: which parts go back through the sharding-aware path, which directly?
        # HINT 2         set_state_dict(model, optimizer, model_state_dict=..., optim_state_dict=...); load_state_dict
        #                on the scheduler and on the sampler; the step is an attribute.
        # HINT 3         set_state_dict(model, optimizer, model_state_dict=..., optim_state_dict=...); restore
        #                scheduler, sampler, step.
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        self.step = state["step"]
        # END SOLUTION


def save_sharded(root, model, optimizer, scheduler, sampler, step: int) -> Path:
    """Every rank calls this. Returns the finished checkpoint folder."""
    root = Path(root)
    final, partial = root / f"step-{step:06d}", root / f"step-{step:06d}.partial"
    rank = dist.get_rank()
    if rank == 0:  # what an earlier, killed save of this step left behind must not be promoted
        shutil.rmtree(partial, ignore_errors=True)
    dist.barrier()
    # BEGIN SOLUTION On return, on every rank, the folder for this step is complete (every rank's shards, the
    #                metadata, one RNG file per rank) and root's latest names it. Killed at any moment, root still
    #                offers only complete checkpoints: nothing appears under the final name before every rank has
    #                written all of its part, and latest changes only after that. A folder already complete under the
    #                final name (an earlier save of this step) stays as it is, never moved or removed: a folder cannot
    #                be replaced in one atomic step, and latest may be naming it.
    # HINT 1         Atomic publication: a reader trusts whatever latest names. Where must the files go while they
    #                are incomplete, how does rank 0 learn that every rank is done, and which single step makes the
    #                checkpoint appear all at once?
    # HINT 2         dcp.save of {"train": TrainState} into the partial folder; each rank's RNG with
    #                ckpt.atomic_save; barriers between the phases; rank 0 uses os.replace and ckpt.atomic_write_text.
    # HINT 3         dcp.save({"train": TrainState(...)}, checkpoint_id=partial); each rank atomic_saves rng_state()
    #                to partial/rng-rank{rank}.pt; barrier; rank 0 renames partial to final (os.replace; where final
    #                exists already, it removes partial instead) and atomically writes root/latest; barrier.
    dcp.save({"train": TrainState(model, optimizer, scheduler, sampler, step)}, checkpoint_id=str(partial))
    ckpt.atomic_save({"rng": ckpt.rng_state()}, partial / f"rng-rank{rank}.pt")
    dist.barrier()
    if rank == 0:
        if final.exists():  # saved before (a resumed run again): complete, kept
            shutil.rmtree(partial)
        else:
            os.replace(partial, final)
        ckpt.atomic_write_text(final.name, root / "latest")
    dist.barrier()
    # END SOLUTION
    return final


def load_sharded(root, model, optimizer, scheduler, sampler) -> int:
    """Every rank calls this, at any world size. Returns the step to continue from.

    RNG: a rank that existed at save time gets its own stream back; a new rank (the job grew)
    keeps its fresh seed — bit-identity across world sizes is not possible anyway.
    """
    root = Path(root)
    folder = root / (root / "latest").read_text().strip()
    # BEGIN SOLUTION On every rank, at any world size: model, optimizer, scheduler and sampler hold the state of the
    #                checkpoint latest names (each rank reads only the slices its own shards need), a rank that
    #                existed at save time has its RNG stream back (a new rank keeps its seed), and the saved step is
    #                returned: the step to continue from.
    # HINT 1         A sharded load fills the slices the current layout asks for. What has to exist before loading
    #                to describe that layout? Which state is per rank, and may be missing when the world size grew?
    # HINT 2         The same {"train": TrainState} shape as the save, given to dcp.load with the folder as
    #                checkpoint_id; this rank's RNG file through ckpt.load and ckpt.set_rng_state when it exists.
    # HINT 3         state = {"train": TrainState(...)}; dcp.load(state, checkpoint_id=folder); restore this rank's
    #                RNG file if it exists; return the step.
    state = {"train": TrainState(model, optimizer, scheduler, sampler)}
    dcp.load(state, checkpoint_id=str(folder))
    rng = folder / f"rng-rank{dist.get_rank()}.pt"
    if rng.exists():
        ckpt.set_rng_state(ckpt.load(rng)["rng"])
    return state["train"].step
    # END SOLUTION
