"""Lab 1's train step, data-parallel and with gradient accumulation.

Global batch = per-rank batch x world size x accumulation steps. Each micro-step's loss is divided
by the number of micro-steps, so the accumulated gradient is the gradient of the mean loss;
the wrapper averages across ranks. Only the last micro-step communicates: the others run under
no_sync(), which is k-1 all-reduces of the full gradient saved per step.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch


def train_step(model, optimizer, scheduler, micro_batches, grad_clip: float = 1.0) -> float:
    """One optimizer step over `micro_batches` [(x, y), ...] on this rank; returns this rank's mean loss.

    `model` is NaiveDDP, BucketedDDP or torch DDP. Hand-written wrappers finish their
    communication in model.finish_gradient_synchronization(); torch DDP has none (its reducer
    finishes inside backward).
    """
    # BEGIN SOLUTION zero grads; for each micro-batch forward+backward of loss/k, under model.no_sync() for all but the
    #                last; then finish synchronisation, clip, step optimizer and scheduler
    optimizer.zero_grad(set_to_none=True)
    k = len(micro_batches)
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < k - 1 else nullcontext():
            _, loss = model(x, y)
            (loss / k).backward()
        total = total + loss.detach()  # stays on the device: no sync per micro-step
    finish = getattr(model, "finish_gradient_synchronization", None)
    if finish is not None:
        finish()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return (total / k).item()
    # END SOLUTION
