# GENERATED from solutions/lab4_debugging/incident5.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
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
    if dist.get_rank() == 0:  # the weights are the same on every rank: save them once
        torch.save({"model": ddp.module.state_dict(), "step": step}, path)
    dist.barrier()


def load_checkpoint(path, ddp, optimizer) -> int:
    """Every rank calls this before training; returns the last completed step."""
    state = torch.load(path)
    ddp.module.load_state_dict(state["model"])
    return state["step"]
