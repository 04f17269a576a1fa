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
    raise NotImplementedError("TODO(lab1): One update from batch alone: gradients of earlier steps are cleared at the "
                              "start, so afterwards each parameter's gradient is this batch's gradient of the model's "
                              "mean loss, its global norm clipped to grad_clip before the optimizer used it; optimizer "
                              "and scheduler each stepped once, optimizer first. Returns the loss as a Python float, "
                              "read once: each read waits for the device. (hints: checker hint lab1 step.train_step)")
