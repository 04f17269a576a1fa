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
    # BEGIN SOLUTION One update from batch alone: gradients of earlier steps are cleared at the start, so afterwards
    #                each parameter's gradient is this batch's gradient of the model's mean loss, its global norm
    #                clipped to grad_clip before the optimizer used it; optimizer and scheduler each stepped once,
    #                optimizer first. Returns the loss as a Python float, read once: each read waits for the device.
    # HINT 1         Gradients add up in place until cleared, and the optimizer applies whatever they hold when it
    #                steps; the scheduler moves the learning rate the next update uses. At which moment must gradients
    #                be cleared, and at which clipped, so the update uses exactly this batch's clipped gradient at this
    #                step's rate?
    # HINT 2         The pieces: the optimizer's zero_grad (set_to_none), the model's forward (it returns logits and the
    #                mean loss), backward, torch.nn.utils.clip_grad_norm_ (the global norm over all parameters, not per
    #                element), the optimizer's and the scheduler's step, one .item(). Their order follows from the
    #                contract.
    # HINT 3         optimizer.zero_grad(set_to_none=True); _, loss = model(inputs, targets); loss.backward();
    #                clip the gradients' total norm to grad_clip (torch.nn.utils.clip_grad_norm_); optimizer.step();
    #                scheduler.step();
    #                return loss.item().
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(inputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return loss.item()
    # END SOLUTION
