# GENERATED from solutions/lab6_model_parallel/schedules.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Pipeline schedules by hand: GPipe and 1F1B over point-to-point send/recv, with micro-batches.

    torchrun --nproc_per_node 2 -m labs.lab6_model_parallel.pp_timeline --out runs/lab6/pp.json

Rank r runs stage r of p. A micro-batch's forward receives the activation from stage r-1 (the first
stage reads the data), runs the stage, and sends its output to stage r+1 (the last stage computes the
loss). Its backward receives dL/d(output) from stage r+1, runs autograd through the stage, and sends
dL/d(input) to stage r-1. The two schedules differ only in order:
    GPipe  all m forwards, then all m backwards. Each stage holds m micro-batches' activations at once.
    1F1B   stage r runs p-1-r forwards (warm-up), then alternates one forward, one backward (steady
           state), then the remaining backwards (cool-down). A backward frees a micro-batch as soon as
           possible: stage r never holds more than p-r of them; the bubble, (p-1)/(m+p-1), is the same.
The loss of the step is the mean over micro-batches, so each micro-batch's loss is divided by m before
its backward, and the gradients accumulate in .grad: the step's gradient equals the whole batch's.

Sends and receives facing each other go out together. In 1F1B's steady state stage 0 sends micro-batch
i+1 forward and then waits for micro-batch i's gradient, while stage 1 sends that gradient back and then
waits for micro-batch i+1: each send waits for a receive the peer posts only after its own send. gloo
buffers a send and gets away with it; NCCL runs a pair's transfers in order on one stream and needs the
send and the receive issued as one group (torch.distributed.batch_isend_irecv) to guarantee progress.
So a send is held until this stage's next receive and both go in one batch (what Megatron-LM's
send_forward_recv_backward does); a send with no receive coming next (the first stage's forwards, the
last stage's backwards) goes out at once. Sends are waited for at the end of the step.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn


class Pipe:
    """One step of one stage: its micro-batches, what each keeps between forward and backward, its sends."""

    def __init__(self, stage: nn.Module, micro_batches: list, loss_fn: Callable, act_shape: tuple):
        self.stage, self.micro_batches, self.loss_fn, self.act_shape = stage, micro_batches, loss_fn, tuple(act_shape)
        self.rank, self.p, self.m = dist.get_rank(), dist.get_world_size(), len(micro_batches)
        self.first, self.last = self.rank == 0, self.rank == self.p - 1
        self.device = next(stage.parameters()).device
        self.inputs: dict[int, torch.Tensor] = {}   # micro-batch -> the input whose .grad goes back upstream
        self.outputs: dict[int, torch.Tensor] = {}  # micro-batch -> output (or the scaled loss on the last stage)
        self.losses: list[float] = []               # last stage: each micro-batch's loss, unscaled
        self.sends: list = []                       # (work, tensor): the tensor must live until the send is done
        self.held: list[dist.P2POp] = []            # sends waiting to go out with the next receive

    def _send(self, t: torch.Tensor, dst: int) -> None:
        self.held.append(dist.P2POp(dist.isend, t.contiguous(), dst))

    def _flush(self) -> None:
        """Send what is held now: no receive follows to pair it with."""
        if self.held:
            ops, self.held = self.held, []
            self.sends.extend(zip(dist.batch_isend_irecv(ops), [op.tensor for op in ops]))

    def _recv(self, src: int) -> torch.Tensor:
        """Receive from src, in one batch with the sends held (see the module's docstring)."""
        buf = torch.empty(self.act_shape, device=self.device)
        ops, self.held = self.held + [dist.P2POp(dist.irecv, buf, src)], []
        works = dist.batch_isend_irecv(ops)
        self.sends.extend(zip(works[:-1], [op.tensor for op in ops[:-1]]))
        works[-1].wait()
        return buf

    def forward(self, i: int) -> None:
        """Micro-batch i's forward on this stage."""
        x, y = self.micro_batches[i]
        if self.first:
            self._flush()  # this forward receives nothing: what is held goes now
        raise NotImplementedError("TODO(lab6): Micro-batch i's forward on this stage: its input is the data (first "
                                  "stage) or the activation received from stage r-1, as a tensor that will get a "
                                  "gradient; its output goes to stage r+1 cut from this stage's graph, or on the last "
                                  "stage becomes the loss, recorded unscaled and kept divided by m (so the gradients "
                                  "add up to the batch mean's). Input and output are kept until backward. (hints: "
                                  "checker hint lab6 schedules.forward)")

    def backward(self, i: int) -> None:
        """Micro-batch i's backward on this stage; frees what its forward kept."""
        if self.last:
            self._flush()  # this backward receives nothing: what is held goes now
        raise NotImplementedError("TODO(lab6): Micro-batch i's backward on this stage, freeing what its forward kept: "
                                  "the last stage backpropagates its scaled loss, the others their output with the "
                                  "gradient received from stage r+1, so the parameters' gradients accumulate; every "
                                  "stage but the first then sends the gradient of its input to stage r-1. (hints: "
                                  "checker hint lab6 schedules.backward)")

    def finish(self) -> None:
        self._flush()
        for work, _ in self.sends:
            work.wait()
        self.sends.clear()


def gpipe(pipe: Pipe) -> None:
    """All forwards, then all backwards."""
    raise NotImplementedError("TODO(lab6): Every micro-batch's forward, in order, before any backward, then every "
                              "backward in the same order: stage r+1 works on micro-batch i while stage r computes "
                              "i+1, so the bubble is (p-1)/(m+p-1) (p = 2, m = 4: 0.20), and each stage holds all m "
                              "micro-batches' activations at the peak. (hints: checker hint lab6 schedules.gpipe)")


def one_f_one_b(pipe: Pipe) -> None:
    """Warm-up forwards, then one forward + one backward at a time, then the remaining backwards."""
    raise NotImplementedError("TODO(lab6): The same micro-batches and bubble as GPipe, less memory: stage r runs p-1-r "
                              "warm-up forwards (at most m), then alternates the next micro-batch's forward with the "
                              "oldest one's backward, then the remaining backwards, so it never holds more than p-r "
                              "micro-batches' activations (p = 2: two on stage 0, one on stage 1; GPipe holds m). "
                              "(hints: checker hint lab6 schedules.one_f_one_b)")


SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b}


def pipeline_step(stage: nn.Module, micro_batches: list, loss_fn: Callable, act_shape: tuple,
                  schedule: str = "1f1b") -> list[float]:
    """One training step's forward and backward of this rank's stage (rank r = stage r of world size p).

    micro_batches: [(x, y), ...] on every rank (the first stage uses x, the last y); act_shape: the shape
    of the tensor between stages. Returns the last stage's per-micro-batch losses ([] elsewhere) and
    leaves in .grad the gradient of the mean loss over all micro-batches.
    """
    pipe = Pipe(stage, micro_batches, loss_fn, act_shape)
    SCHEDULES[schedule](pipe)
    pipe.finish()
    return pipe.losses
