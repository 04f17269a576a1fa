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
    # BEGIN SOLUTION Returns, on every rank, the same answer for the same step: True exactly when at least one rank's
    #                loss was non-finite, False otherwise; costs a few bytes of communication per step at most, and
    #                afterwards every rank goes on to the same next step, whichever ranks hit a bad batch.
    # HINT 1         When the job is stopped, every rank's stack is written into the log. Read them: which line is each
    #                rank in, at which step, and is it the same collective on every rank? What was special about that
    #                step?
    # HINT 2         skip_step's all_reduce runs only on the rank whose loss is non-finite: the others never reach it
    #                and are already in their next step's collectives.
    # HINT 3         Call the collective on every rank, every step: all-reduce a flag (1.0 where this rank's loss is
    #                non-finite, else 0.0) and skip everywhere when the sum is above 0.
    # A collective must be called by every rank, in the same order. Called inside a branch that only the
    # unlucky rank enters, all_reduce waits for peers that have moved on to their next collective (the
    # next step's gradient all-reduce): they hang, or worse pair up with the wrong call. So every rank
    # contributes a flag every step: 4 bytes, nothing next to the 0.48 MB gradient all-reduce.
    flag = torch.tensor([0.0 if math.isfinite(loss) else 1.0], device=device)
    dist.all_reduce(flag)
    return flag.item() > 0
    # STARTER
    # if math.isfinite(loss):
    #     return False
    # # This rank hit a bad batch: find out how many ranks did, for the log, and skip the update.
    # flag = torch.ones(1, device=device)
    # dist.all_reduce(flag)
    # print(f"[rank={dist.get_rank()}] step {step}: non-finite loss on {int(flag.item())} rank(s)", flush=True)
    # return True
    # END SOLUTION
