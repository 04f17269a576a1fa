"""Lab 1's train step, data-parallel and with gradient accumulation.

Global batch = per-rank batch x world size x accumulation steps. The accumulated gradient must be
the gradient of the mean loss over all of it; the wrapper averages across ranks. Only the last
micro-step communicates, which saves k-1 all-reduces of the full gradient per step.
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
    # BEGIN SOLUTION One update from k micro-batches per rank: afterwards every rank's gradient is that of the mean loss
    #                over all B x N x k samples, global norm clipped to grad_clip; optimizer and scheduler stepped once
    #                each. Only the last micro-step's backward communicates: k - 1 full-gradient all-reduces saved.
    #                Returns this rank's mean micro-batch loss as a float, read once.
    # HINT 1         Gradients add up across backwards. Each micro-batch loss is a mean over B samples: what must it be
    #                scaled by so k backwards sum to the gradient of the mean over k x B? And which one backward needs
    #                its gradients to cross the network?
    # HINT 2         The wrapper's no_sync() context keeps a backward local; the hand-written wrappers finish their
    #                communication in finish_gradient_synchronization() (torch DDP has none: look it up with getattr);
    #                clipping and stepping are lab 1's. Sum the micro-losses detached, on the device: no .item() per
    #                micro-step.
    # HINT 3         optimizer.zero_grad(set_to_none=True); for i, (x, y): with model.no_sync() if i < k - 1 else
    #                nullcontext(): _, loss = model(x, y); (loss / k).backward(); total = total + loss.detach(); then
    #                finish() if the model has it; clip_grad_norm_; optimizer.step(); scheduler.step(); return (total /
    #                k).item().
    # Each micro-step's loss is divided by the number of micro-steps, so the accumulated gradient is the gradient
    # of the mean loss; all but the last micro-step run under no_sync().
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
