# GENERATED from solutions/lab10_moe/checkpoint.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
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
    raise NotImplementedError("TODO(lab10): After this returns on every rank, root holds what each rank needs to take "
                              "step `step` + 1 exactly as if never stopped: its own experts and dense weights, every "
                              "buffer (the selection biases), its optimizer's state, the step. A kill during the write "
                              "never leaves a file that loads as complete. (hints: checker hint lab10 "
                              "checkpoint.save_checkpoint)")


def load_checkpoint(root, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Every rank, same layout as the save: its own state back into model and optimizer; the step to go on from."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    raise NotImplementedError("TODO(lab10): model (parameters and buffers) and optimizer hold exactly what this rank "
                              "saved, whatever they held before; the return value is the step saved. (hints: checker "
                              "hint lab10 checkpoint.load_checkpoint)")
