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
    # BEGIN SOLUTION Returns the validation loss on the steps that are multiples of eval_every (the dashboard's rank
    #                must have one then) and None on the others, so validation costs each rank about one validation per
    #                eval_every steps: no rank does extra work every step while its peers wait for it.
    # HINT 1         Read the per-rank "rank times" lines: time inside train_step and outside it, per rank. Which rank
    #                is busy outside the step while the other waits inside it, and doing what?
    # HINT 2         after_step: the dashboard's rank runs a full validation (8 batches of forward passes) after every
    #                step.
    # HINT 3         Validate only when step % job.eval_every == 0 (on every rank, or at least on the dashboard's),
    #                return None otherwise: the cost is paid once per eval_every steps.
    # A data-parallel step is as slow as its slowest rank: the next step's all-reduce waits for everyone.
    # Validating on one rank every step adds VAL_BATCHES forward passes (~2-3x a training step's compute)
    # to that rank, and the others spend it waiting inside their next backward. Validate every
    # eval_every steps: the cost is paid once per eval_every steps, not every step.
    if step % job.eval_every:
        return None
    return validate(model, data, job, env.device)
    # STARTER
    # if env.rank != job.dashboard_rank:
    #     return None
    # return validate(model, data, job, env.device)  # fresh numbers for the dashboard every step
    # END SOLUTION
