# GENERATED from solutions/lab4_debugging/incident3.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Incident 3 — "The job got 2x slower since the dashboard went live. No errors; every rank reports slow steps."

The team's dashboard wants a validation loss. Reproduce, diagnose, fix `after_step` below
(the dashboard still needs a validation loss every `job.eval_every` steps):

    python -m labs.lab4_debugging.run 3
"""
from __future__ import annotations

import torch

VAL_BATCHES = 8  # 8 batches of job.batch sequences: about 8 micro-batches' worth of forward passes


@torch.no_grad()
def validate(model, data, job, device) -> float:
    """Mean loss over VAL_BATCHES fixed batches (the same ones every time)."""
    was_training = model.training
    model.eval()
    total = 0.0
    for b in range(VAL_BATCHES):
        ids = torch.arange(b * job.batch, (b + 1) * job.batch) * 7919 % data.num_windows(job.seq)
        x, y = data.batch(ids.numpy(), job.seq, device)
        total += model(x, y)[1].item()
    model.train(was_training)
    return total / VAL_BATCHES


def after_step(model, step: int, job, data, env) -> float | None:
    """Called on every rank after each optimizer step; returns the validation loss when it validated."""
    if env.rank != job.dashboard_rank:
        return None
    return validate(model, data, job, env.device)  # fresh numbers for the dashboard every step
