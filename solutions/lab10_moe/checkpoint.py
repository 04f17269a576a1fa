"""Saving and resuming an expert-parallel run: every rank holds state no other rank has.

In data parallelism every rank holds the same weights, and rank 0 alone can save them. Under expert parallelism
rank r holds experts r*E/N .. (r+1)*E/N - 1 that exist nowhere else, and their optimizer moments with them: a
checkpoint is one file per rank (or a sharded format, lab 3's DCP), and a resume at the same layout reads each
rank's own. Two more pieces of state hide in an MoE: each layer's selection bias is a buffer, not a parameter
(model.parameters() misses it; model.state_dict() has it), and it decides the next step's routing: a resume that
loses it routes differently, and every loss after it differs. Bytes per rank, fp32 with AdamW: weights + two
moments = 12 B per parameter it holds (its experts' and a replica of the dense ones) + E floats of bias per layer.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist


def _path(root, rank: int) -> Path:
    return Path(root) / f"rank{rank}.pt"


def save_checkpoint(root, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Every rank, after `step` steps: everything its next step depends on, under the folder root, complete on
    disk when this returns on every rank."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    # BEGIN SOLUTION After this returns on every rank, root holds what each rank needs to take step `step` + 1
    #                exactly as if never stopped: its own experts and dense weights, every buffer (the selection
    #                biases), its optimizer's state, the step. A kill during the write never leaves a file that
    #                loads as complete.
    # HINT 1         Which of your rank's tensors exist on no other rank? Which state is not a parameter?
    # HINT 2         One file per rank: the model's state_dict (buffers included), the optimizer's state_dict, the
    #                step; written to a temporary name and renamed, then a barrier.
    # HINT 3         Path(root).mkdir(parents=True, exist_ok=True); tmp = path.with_suffix(".tmp"); torch.save(
    #                {"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}, tmp);
    #                os.replace(tmp, path); dist.barrier().
    path = _path(root, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)  # atomic: a kill mid-write leaves the old file or none, never half of one
    if dist.is_initialized():
        dist.barrier()  # every rank's file is down before anyone reports the checkpoint taken
    # END SOLUTION


def load_checkpoint(root, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Every rank, same layout as the save: its own state back into model and optimizer; the step to go on from."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    # BEGIN SOLUTION model (parameters and buffers) and optimizer hold exactly what this rank saved, whatever they
    #                held before; the return value is the step saved.
    # HINT 1         Whose file does this rank read?
    # HINT 2         The inverse of the save, strict: a missing key is a bug, not a default.
    # HINT 3         state = torch.load(path, map_location=<the model's device>); model.load_state_dict(
    #                state["model"]); optimizer.load_state_dict(state["optim"]); return state["step"].
    device = next(model.parameters()).device
    state = torch.load(_path(root, rank), map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    return int(state["step"])
    # END SOLUTION
