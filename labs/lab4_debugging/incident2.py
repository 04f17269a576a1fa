# GENERATED from solutions/lab4_debugging/incident2.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Incident 2 — "Training runs fine for a few steps, then every rank stops printing. No error for minutes."

The team added a guard last week: a batch that gives a non-finite loss (a corrupt sample, an
overflow) must not poison the weights, so its update is skipped. Reproduce, diagnose, fix
`skip_step` below:

    python -m labs.lab4_debugging.run 2

(The report comes from the GPU cluster. Here, on CPU, gloo may end the silence itself within seconds, with an
error of its own: that line is evidence too.)
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def skip_step(loss: float, step: int, device: torch.device) -> bool:
    """Called on every rank after backward, before optimizer.step(): True to skip this step's update.

    Backward's all-reduce has already averaged every rank's gradient into every rank's .grad, so a
    non-finite loss on one rank has made every rank's gradient non-finite: skip on all ranks or none.
    """
    if math.isfinite(loss):
        return False
    # This rank hit a bad batch: find out how many ranks did, for the log, and skip the update.
    flag = torch.ones(1, device=device)
    dist.all_reduce(flag)
    print(f"[rank={dist.get_rank()}] step {step}: non-finite loss on {int(flag.item())} rank(s)", flush=True)
    return True
