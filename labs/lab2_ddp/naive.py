# GENERATED from solutions/lab2_ddp/naive.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Naive data parallelism: same start, then average every gradient across ranks after backward.

Two collectives make the N replicas one model:
  broadcast   once, at wrap time: rank 0's initial weights to every rank (ranks may have
              initialised differently; from here on identical updates keep them identical);
  all-reduce  every step, one per parameter tensor, after backward: sum, then divide by N, so each
              rank holds the gradient of the mean loss over the global batch.
Cost: a ring all-reduce moves 2(N-1)/N x the gradient bytes per rank (4 bytes/param in fp32),
and here none of it overlaps with compute: backward finishes, then communication starts.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn as nn


def broadcast_module(module: nn.Module, src: int = 0) -> None:
    """Copy rank `src`'s parameters and buffers to every rank, in place."""
    raise NotImplementedError("TODO(lab2): dist.broadcast every parameter's .data and every buffer from src")


class NaiveDDP(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        broadcast_module(module)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        """After backward: every .grad becomes the mean of the ranks' gradients."""
        raise NotImplementedError("TODO(lab2): for each parameter with a grad: dist.all_reduce (sum) then divide by "
                                  "the world size")

    @contextmanager
    def no_sync(self):
        """Nothing to skip: this wrapper only communicates in finish_gradient_synchronization()."""
        yield
