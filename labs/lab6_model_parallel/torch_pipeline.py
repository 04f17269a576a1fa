# GENERATED from solutions/lab6_model_parallel/torch_pipeline.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""The same schedules with torch.distributed.pipelining: a stage object and a schedule object.

    torchrun --nproc_per_node 2 -m labs.lab6_model_parallel.pp_timeline --out runs/lab6/pp.json

The library does your Pipe's jobs: the receive buffers, each micro-batch's saved tensors and sends, the
order of forwards and backwards, the loss on the last stage and the 1/m scaling of the gradients.

How a step is driven (every rank calls step, with what its stage needs):
    first stage   schedule.step(x)                          x: the whole batch, split by the schedule
    last stage    schedule.step(target=y, losses=losses)    losses: filled with one loss per micro-batch
    middle        schedule.step()
The tied embedding/head weight still needs sync_tied_grads afterwards: torch does not know it is tied.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn


def torch_schedule(stage_module: nn.Module, n_micro: int, loss_fn: Callable, device: torch.device,
                   schedule: str = "1f1b"):
    """A torch.distributed.pipelining schedule for this rank's stage (rank r = stage r of the world)."""
    raise NotImplementedError("TODO(lab6): Returns a schedule object of torch's pipelining library that runs this "
                              "stage module as stage number rank of world-size stages on `device`, splits each batch "
                              "into n_micro micro-batches, computes loss_fn on the last stage, averages the gradients "
                              "over the micro-batches (as your Pipe's loss / m does), and runs GPipe or 1F1B as "
                              "`schedule` says. (hints: checker hint lab6 torch_pipeline.torch_schedule)")
