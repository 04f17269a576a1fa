"""One optimisation step: which gradient the update uses, at which learning rate, and what the step leaves behind."""
from __future__ import annotations

import torch


def train_step(model, optimizer, scheduler, batch, grad_clip: float = 1.0) -> float:
    """Run one training step on `batch` = (inputs, targets), both (B, T) int64 on the model's device.

    Contract (the checker relies on it):
      - returns this step's training loss as a Python float;
      - the update uses this batch's gradient alone, of the model's mean loss, clipped, and after the step
        returns every parameter's .grad still holds that (clipped) gradient;
      - each call updates the weights once, at the learning rate the schedule held when the call began, and
        leaves the schedule one position further on.

    Why clip: one bad batch early in training can give a gradient 100x the typical norm; clipping
    the global norm to `grad_clip` keeps that step from undoing the run.
    Why read the loss only once: each read waits for the device, and the loss is needed for the log anyway.
    """
    # BEGIN SOLUTION One update of the weights from batch alone. The update applies the gradient of the model's mean
    #                loss over this batch, no earlier batch's added in, scaled if needed so that its global norm (one
    #                norm over every parameter's gradient together, not one per tensor) is at most grad_clip, at the
    #                learning rate the schedule held when the call began; when the call returns, the schedule stands
    #                one position further on (the next call's rate) and each parameter's gradient holds exactly the
    #                gradient the update applied. Returns the loss as a Python float, the device waited for once: each
    #                read of a device value waits for it.
    # HINT 1         Gradients add up in place until cleared, and the optimizer applies whatever they hold when it
    #                steps; the scheduler moves the learning rate the next update uses. At which moment must gradients
    #                be cleared, and at which clipped, so the update uses exactly this batch's clipped gradient at this
    #                step's rate?
    # HINT 2         The pieces: the optimizer's zero_grad (set_to_none), the model's forward (it returns logits and the
    #                mean loss), backward, torch.nn.utils.clip_grad_norm_ (the global norm over all parameters, not per
    #                element), the optimizer's and the scheduler's step, one .item(). Their order follows from the
    #                contract: gradients cleared before backward, never after the update; clipped between backward and
    #                the optimizer's step; the scheduler stepped after the optimizer, since its step sets the next rate.
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
