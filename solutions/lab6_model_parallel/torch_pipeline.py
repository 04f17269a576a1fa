"""The same schedules with torch.distributed.pipelining: a stage object and a schedule object.

    torchrun --nproc_per_node 2 -m solutions.lab6_model_parallel.pp_timeline --out runs/lab6/pp.json

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
    # BEGIN SOLUTION Returns a schedule object of torch's pipelining library that runs this stage module as stage number
    #                rank of world-size stages on `device`, splits each batch into n_micro micro-batches, computes
    #                loss_fn on the last stage, averages the gradients over the micro-batches (as your Pipe's loss / m
    #                does), and runs GPipe or 1F1B as `schedule` says.
    # HINT 1         Your Pipe did three jobs: the receive buffers, the per-micro-batch bookkeeping of sends and saved
    #                tensors, and the order of forwards and backwards. Which library object does which, and what must
    #                each know about this rank?
    # HINT 2         torch.distributed.pipelining's PipelineStage (module, stage index, number of stages, device) and
    #                ScheduleGPipe / Schedule1F1B (stage, n_microbatches=, loss_fn=); keep their default gradient
    #                scaling.
    # HINT 3         (import the three from torch.distributed.pipelining inside the function: it pulls in dynamo)
    #                stage = PipelineStage(stage_module, dist.get_rank(), dist.get_world_size(), device); cls =
    #                {'gpipe': ScheduleGPipe, '1f1b': Schedule1F1B}[schedule]; return cls(stage, n_microbatches=n_micro,
    #                loss_fn=loss_fn)
    # imported here, not at the top: it pulls in torch._dynamo (~1 s per rank), and only this function needs it
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    # PipelineStage wraps this rank's stage module and does your Pipe's bookkeeping: it allocates the receive
    # buffers (their shapes it infers by running one micro-batch through the pipe once), keeps each micro-batch's
    # input and output until its backward, and sends and receives activations and gradients. The schedule object
    # runs the order (GPipe or 1F1B), splits the batch into n_microbatches along dim 0, calls loss_fn(output,
    # target) on the last stage and, with scale_grads (the default), divides the accumulated gradients by
    # n_microbatches, which equals your loss / m.
    stage = PipelineStage(stage_module, dist.get_rank(), dist.get_world_size(), device)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    return cls(stage, n_microbatches=n_micro, loss_fn=loss_fn)
    # END SOLUTION
