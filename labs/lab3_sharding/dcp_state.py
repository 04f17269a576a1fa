# GENERATED from solutions/lab3_sharding/dcp_state.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
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
        raise NotImplementedError("TODO(lab3): Returns everything a resume reads, under keys the load side reads back: "
                                  "the model's and the optimizer's state as this rank's shards keyed by fully "
                                  "qualified parameter names (not by position, so N ranks' checkpoint loads into any "
                                  "number), plus the scheduler's and sampler's state and the step, the same on every "
                                  "rank. (hints: checker hint lab3 dcp_state.state_dict)")

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError("TODO(lab3): Afterwards the model's and the optimizer's shards, the scheduler, the "
                                  "sampler and the step are those in `state` (the dict your save side returned, its "
                                  "tensors filled in by the loader in this rank's layout), so the next step is the one "
                                  "the saved run would have taken. (hints: checker hint lab3 "
                                  "dcp_state.load_state_dict)")


def save_sharded(root, model, optimizer, scheduler, sampler, step: int) -> Path:
    """Every rank calls this. Returns the finished checkpoint folder."""
    root = Path(root)
    final, partial = root / f"step-{step:06d}", root / f"step-{step:06d}.partial"
    rank = dist.get_rank()
    if rank == 0:  # what an earlier, killed save of this step left behind must not be promoted
        shutil.rmtree(partial, ignore_errors=True)
    dist.barrier()
    raise NotImplementedError("TODO(lab3): On return, on every rank, the folder for this step is complete (every "
                              "rank's shards, the metadata, one RNG file per rank) and root's latest names it. Killed "
                              "at any moment, root still offers only complete checkpoints: nothing appears under the "
                              "final name before every rank has written all of its part, and latest changes only after "
                              "that. A folder already complete under the final name (an earlier save of this step) "
                              "stays as it is, never moved or removed: a folder cannot be replaced in one atomic step, "
                              "and latest may be naming it. (hints: checker hint lab3 dcp_state.save_sharded)")
    return final


def load_sharded(root, model, optimizer, scheduler, sampler) -> int:
    """Every rank calls this, at any world size. Returns the step to continue from.

    RNG: a rank that existed at save time gets its own stream back; a new rank (the job grew)
    keeps its fresh seed — bit-identity across world sizes is not possible anyway.
    """
    root = Path(root)
    folder = root / (root / "latest").read_text().strip()
    raise NotImplementedError("TODO(lab3): On every rank, at any world size: model, optimizer, scheduler and sampler "
                              "hold the state of the checkpoint latest names (each rank reads only the slices its own "
                              "shards need), a rank that existed at save time has its RNG stream back (a new rank "
                              "keeps its seed), and the saved step is returned: the step to continue from. (hints: "
                              "checker hint lab3 dcp_state.load_sharded)")
