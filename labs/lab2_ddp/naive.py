# GENERATED from solutions/lab2_ddp/naive.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Naive data parallelism: same start, then average every gradient across ranks after backward.

Two collectives make the N replicas one model:
  broadcast   once, at wrap time: rank 0's initial weights to every rank (ranks may have
              initialised differently; from here on identical updates keep them identical);
  all-reduce  every step, after backward, so that each rank holds the gradient of the mean loss
              over the global batch.
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
    raise NotImplementedError("TODO(lab2): Afterwards every rank's parameters and buffers hold rank src's values bit "
                              "for bit, in place: the same tensor objects, so an optimizer built on them still holds "
                              "them. Ranks may have initialised differently; from identical weights, identical "
                              "averaged updates keep them identical. Once, at wrap time: the model's bytes (tiny: 482 "
                              "KB in fp32) from src to every rank. (hints: checker hint lab2 naive.broadcast_module)")


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
        raise NotImplementedError("TODO(lab2): After backward, every existing gradient on every rank equals the mean "
                                  "over the N ranks of their local gradients: the gradient of the mean loss over the "
                                  "global batch (each local loss is already a mean over its B samples: average, don't "
                                  "sum). A ring moves 2 x (N-1)/N x 4 B/param per rank per step, none of it overlapped "
                                  "with backward here. (hints: checker hint lab2 "
                                  "naive.finish_gradient_synchronization)")

    @contextmanager
    def no_sync(self):
        """Nothing to skip: this wrapper only communicates in finish_gradient_synchronization()."""
        yield
