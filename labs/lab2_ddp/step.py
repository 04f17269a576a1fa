# GENERATED from solutions/lab2_ddp/step.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
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
    raise NotImplementedError("TODO(lab2): zero grads; for each micro-batch forward+backward of loss/k, under "
                              "model.no_sync() for all but the last; then finish synchronisation, clip, step optimizer "
                              "and scheduler")
