"""One optimisation step: forward, backward, clip, step, schedule."""
from __future__ import annotations

import torch


def train_step(model, optimizer, scheduler, batch, grad_clip: float = 1.0) -> float:
    """Run one training step on `batch` = (inputs, targets), both (B, T) int64 on the model's device.

    Contract (the checker relies on it):
      - returns this step's training loss as a Python float;
      - gradients are cleared at the *start* of the step, so after it returns every
        parameter's .grad holds this step's (clipped) gradient;
      - the optimizer steps once and the scheduler steps once.

    Why clip: one bad batch early in training can give a gradient 100x the typical norm; clipping
    the global norm to `grad_clip` keeps that step from undoing the run.
    Why .item() only once: it waits for the device, and the loss is needed for the log anyway.
    """
    # BEGIN SOLUTION zero the grads (set_to_none), forward to get the loss, backward, clip the global norm, step
    #                optimizer and scheduler, return loss.item()
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(inputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return loss.item()
    # END SOLUTION
