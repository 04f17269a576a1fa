"""Surviving a lost node: a DCP checkpoint every few steps, and a restart that loads it.

When a node dies, torchrun (--max-restarts >= 1, c10d rendezvous) stops the surviving node's workers,
waits for the node to come back (Slurm or Kubernetes restarts it; here the checker does), and starts
every worker again. The new workers know nothing: they must find the last complete checkpoint and
continue from the step after it, with the same weights, optimizer state and data position, so that the
losses after recovery are bit-identical to a run that was never interrupted.

A checkpoint is complete only once rank 0 has renamed its folder into place and pointed `latest` at it:
a node lost in the middle of a save leaves a `.partial` folder that nothing reads.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict


def _commit(root: Path, partial: Path, final: Path) -> None:
    """Rank 0: move the finished folder into place, then point `latest` at it (each step atomic)."""
    if final.exists():
        import shutil
        shutil.rmtree(final)
    os.replace(partial, final)
    tmp = root / "latest.tmp"
    tmp.write_text(final.name)
    os.replace(tmp, root / "latest")


def save_checkpoint(root, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> Path:
    """Every rank: save model and optimizer (sharded, DCP) and the step into root/step_<step>, atomically."""
    root = Path(root)
    final, partial = root / f"step_{step}", root / f"step_{step}.partial"
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)}, checkpoint_id=str(partial))
    if dist.get_rank() == 0:
        _commit(root, partial, final)
    dist.barrier()  # nobody trains on (or dies) before the checkpoint is in place
    return final


def latest(root) -> Path | None:
    """The last complete checkpoint under root, or None."""
    pointer = Path(root) / "latest"
    return Path(root) / pointer.read_text().strip() if pointer.exists() else None


def resume(root, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Every rank, at start: load the last complete checkpoint under root into model and optimizer (already
    sharded the same way) and return its step; 0 if there is none. The next step to run is the returned + 1."""
    # BEGIN SOLUTION Every rank: model and optimizer (weights, AdamW moments and step counts, sharded as they are now)
    #                hold what the last complete checkpoint under root saved, and the return value is its step, so
    #                the next step is step + 1 and every later loss is bit-identical to an uninterrupted run's. No
    #                complete checkpoint: nothing changes, return 0. A `.partial` folder is never read.
    # HINT 1         A restarted worker knows only what is on disk. Ask: which folder is complete (what does the
    #                commit write last?), what besides the weights must come back for the losses to be identical,
    #                and what does a sharded load read into, given that each rank holds only its shards?
    # HINT 2         latest gives the folder; DCP loads in place into state dicts shaped like the saved ones
    #                (get_state_dict's model and optimizer dicts, and a step tensor); set_state_dict puts them back.
    # HINT 3         folder = latest(root); None: return 0. model_sd, optim_sd = get_state_dict(model, optimizer);
    #                state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}; dcp.load(state,
    #                checkpoint_id=str(folder)); set_state_dict(model, optimizer, model_state_dict=state["model"],
    #                optim_state_dict=state["optim"]); return int(state["step"]).
    from torch.distributed.checkpoint.state_dict import set_state_dict

    folder = latest(root)
    if folder is None:
        return 0
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(state["step"])
    # END SOLUTION
