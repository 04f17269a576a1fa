# GENERATED from solutions/lab2_ddp/step.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
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
    raise NotImplementedError("TODO(lab2): One update from k micro-batches per rank: afterwards every rank's gradient "
                              "is that of the mean loss over all B x N x k samples, global norm clipped to grad_clip; "
                              "optimizer and scheduler stepped once each. Only the last micro-step's backward "
                              "communicates: k - 1 full-gradient all-reduces saved. Returns this rank's mean "
                              "micro-batch loss as a float, read once. (hints: checker hint lab2 step.train_step)")
