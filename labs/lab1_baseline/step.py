# GENERATED from solutions/lab1_baseline/step.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
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
    raise NotImplementedError("TODO(lab1): zero the grads (set_to_none), forward to get the loss, backward, clip the "
                              "global norm, step optimizer and scheduler, return loss.item()")
