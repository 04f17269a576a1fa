# GENERATED from solutions/lab6_model_parallel/schedules.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Pipeline schedules by hand: GPipe and 1F1B over point-to-point send/recv, with micro-batches.

    torchrun --nproc_per_node 2 -m labs.lab6_model_parallel.pp_timeline --out runs/lab6/pp.json

Rank r runs stage r of p. What crosses the cut between stages r and r+1, per micro-batch: the activation
going forward, and the gradient of the loss with respect to it coming back. The first stage reads the data;
the last computes the loss. Autograd's graph never spans two ranks: each stage differentiates its own part.
The two schedules run the same forwards and backwards and differ only in their order:
    GPipe  every forward before any backward: each stage holds m micro-batches' activations at its peak.
    1F1B   the same bubble, (p-1)/(m+p-1), and the same losses and gradients, but stage r never holds more
           than p-r micro-batches at once (from a forward's start to its backward's end): the order that
           achieves it is yours to derive.
The step's loss is the mean over the m micro-batches, and the gradients the m backwards leave in .grad
must be that mean's: the whole batch's.

Sends and receives facing each other go out together. In 1F1B's steady state neighbouring stages each
send something and then wait for what the other sends: each send waits for a receive the peer posts only
after its own send. gloo buffers a send and gets away with it; NCCL runs a pair's transfers in order on one
stream and needs the send and the receive issued as one group (torch.distributed.batch_isend_irecv) to
guarantee progress. So a send is held until this stage's next receive and both go in one batch (what
Megatron-LM's send_forward_recv_backward does); a send with no receive coming next (the first stage's
forwards, the last stage's backwards) goes out at once. Sends are waited for at the end of the step.
_send and _recv below do all of this: use them for every transfer.
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
        self.saved: dict[int, tuple] = {}           # micro-batch -> what its forward keeps for its backward
        self.losses: list[float] = []               # last stage: each micro-batch's loss, as loss_fn gives it
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
        raise NotImplementedError("TODO(lab6): Afterwards micro-batch i has been through this stage: stage r+1 gets "
                                  "this stage's output for it (the first stage's input is the data); on the last stage "
                                  "self.losses gains i's loss as loss_fn gives it. Until i's backward, the stage keeps "
                                  "what that backward will need, and no more: what to differentiate, and where the "
                                  "gradient for stage r-1 will appear. The m backwards together must leave in .grad "
                                  "the gradient of the mean of the m losses. (hints: checker hint lab6 "
                                  "schedules.forward)")

    def backward(self, i: int) -> None:
        """Micro-batch i's backward on this stage; frees what its forward kept."""
        if self.last:
            self._flush()  # this backward receives nothing: what is held goes now
        raise NotImplementedError("TODO(lab6): Afterwards micro-batch i's share of the step's gradient is added to "
                                  "this stage's .grad (the m backwards' shares add up to the gradient of the mean "
                                  "loss), stage r-1 gets the gradient of the loss with respect to the activation it "
                                  "sent for i, and nothing of i's forward is referenced here any more: a backward "
                                  "frees what its forward kept (the checker counts what is still referenced at each "
                                  "forward). (hints: checker hint lab6 schedules.backward)")

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
    """GPipe's losses, gradients and bubble, with at most p - rank micro-batches held on this stage."""
    raise NotImplementedError("TODO(lab6): Runs every micro-batch's forward and backward once on this stage, in an "
                              "order that gives GPipe's losses and gradients and its bubble, (p-1)/(m+p-1) (the "
                              "checker times it on stages of known cost, m = 4 and 8: within 0.06), while stage r "
                              "never holds more than p-r micro-batches at once, counted from a forward's start to its "
                              "backward's end (p = 2, m = 8: at most two on stage 0 and one on stage 1, where GPipe "
                              "holds eight). Every stage decides its order alone, with no message but the sends and "
                              "receives its forwards and backwards make. (hints: checker hint lab6 "
                              "schedules.one_f_one_b)")


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
