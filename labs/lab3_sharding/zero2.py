# GENERATED from solutions/lab3_sharding/zero2.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""ZeRO-2 by hand, as the paper and DeepSpeed build it: flat buffers, and DDP's all-reduce cut in its two halves.

    opt = Zero2Optimizer(param_groups(model), torch.optim.AdamW, lr=3e-3, **ADAMW)   # the model stays plain
    loss = model(x, y)[1]; loss.backward(); opt.step(); opt.zero_grad()

An all-reduce of S bytes is two halves, each moving S(N−1)/N bytes per rank in a ring: after the first, each rank
holds the reduced values of one slice of the buffer only; after the second, every rank holds every slice. DDP's
all-reduce of 4Ψ gradient bytes costs 2·4Ψ(N−1)/N. ZeRO-2 puts the optimizer step between the halves; what holds
after each phase, and its bytes per rank:
    the gradients' half         4Ψ(N−1)/N   rank r holds the mean gradient of its own slice, nothing more
    the step                    —           rank r's slice of the weights is updated, by rank r alone
    the parameters' half        4Ψ(N−1)/N   every rank holds every updated slice
= DDP's 2·4Ψ(N−1)/N exactly (the ZeRO paper: partitioning optimizer state and gradients costs no
extra communication). Which kinds of model state a rank then holds whole, and which 1/N of, is this lab's README
table to fill in.

Layout. Parameters, in reverse registration order (the order backward finishes their gradients),
are packed into buckets of at least bucket_cap_mb (one dtype per bucket). Each bucket's parameters
share the storage of one flat buffer padded with zeros to a multiple of N elements (≤ N − 1 per
bucket), and rank r owns the contiguous slice [r·S/N, (r+1)·S/N) of every bucket of S elements.
The local optimizer steps this rank's slices only: one tensor per parameter, its part inside the
slice (a view of the flat buffer, so the step writes the model's weights in place), padding
excluded, so the moments are 8 B x the elements owned, Ψ/N ± the padding.

Overlap (lab 2's BucketedDDP): a post-accumulate-grad hook copies each gradient into its bucket's
flat gradient buffer and frees it; when a bucket is complete its half of the communication starts
while backward goes on. After the wait only the owned slice is kept (4·S/N bytes);
the rest of the bucket buffer is freed. Gradients of several backwards accumulate in the slice
until zero_grad. Every rank must run backward over the same parameters.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .zero1 import sync_hyperparameters


class FlatBucket:
    """Parameters that travel together, as views of one padded flat buffer; this rank owns [lo, hi)."""

    def __init__(self, params: list[torch.Tensor], rank: int, world_size: int):
        self.params, self.offsets, n = params, [], 0
        for p in params:
            self.offsets.append(n)
            n += p.numel()
        raise NotImplementedError("TODO(lab3): Afterwards self.flat is one buffer, of the parameters' dtype and "
                                  "device, that the bucket's collectives can cut into N equal slices with as little "
                                  "padding as possible, holding each parameter's current values at its offset; and a "
                                  "write to the buffer is a write to the model's parameters (and the other way round). "
                                  "self.lo and self.hi bound this rank's slice: the N ranks' slices are contiguous, in "
                                  "rank order, of equal length, and together cover the buffer. (hints: checker hint "
                                  "lab3 zero2.FlatBucket)")
        self.grad_shard = None   # the reduced gradient of [lo, hi), kept until zero_grad
        self.reset()

    def reset(self) -> None:
        self.flat_grad = None    # the whole bucket's gradients, only while they are being reduced
        self.ready = 0
        self.work = None


class Zero2Optimizer(torch.optim.Optimizer):
    """Wraps any torch.optim class over this rank's slices. `self.optim` is the local optimizer,
    `self.buckets` the flat buckets; param_groups are the full groups (LR schedulers work)."""

    def __init__(self, params, optimizer_cls, bucket_cap_mb: float = 25.0, **defaults):
        super().__init__(params, defaults)  # torch's checks: a bare tensor is a TypeError, an empty list a ValueError
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.cap_bytes, self.buckets, self.bucket_of, self.pieces = bucket_cap_mb * 2**20, [], {}, []
        self.used: set[int] = set()  # ids of the parameters whose gradient arrived since zero_grad
        self.optim = optimizer_cls([{**g, "params": []} for g in self.param_groups], **defaults)
        for gi, g in enumerate(self.param_groups):
            self._shard(gi, g)

    def add_param_group(self, param_group: dict) -> None:
        """A group added after construction is sharded and stepped from then on (torch's contract): torch checks
        it and fills its defaults; its parameters get buckets of their own and a local group."""
        super().add_param_group(param_group)
        if "optim" not in self.__dict__:  # Optimizer.__init__ adding the constructor's groups: __init__ shards them
            return
        self.optim.add_param_group({**self.param_groups[-1], "params": []})
        self._shard(len(self.param_groups) - 1, self.param_groups[-1])

    def _shard(self, gi: int, group: dict) -> None:
        """Bucket group gi's trainable parameters, start every rank from rank 0's weights (as DDP does), hand the
        local optimizer this rank's part of each parameter (a view of the flat buffer: the step writes the model's
        weights in place), and hook each parameter's gradient."""
        trainable = [p for p in group["params"] if p.requires_grad]
        if not trainable:
            return
        buckets = self._make_buckets(trainable, self.cap_bytes)
        self.buckets += buckets
        self.bucket_of.update({id(p): (b, i) for b in buckets for i, p in enumerate(b.params)})
        for b in buckets:
            dist.broadcast(b.flat, src=0)
            for p, off in zip(b.params, b.offsets):
                start, end = max(off, b.lo), min(off + p.numel(), b.hi)
                if start < end:  # one piece per parameter: one that got no gradient is skipped, as torch skips it
                    piece = torch.nn.Parameter(b.flat[start:end])  # shares b.flat's storage
                    self.optim.param_groups[gi]["params"].append(piece)
                    self.pieces.append((piece, b, start - b.lo, end - b.lo, id(p)))
        for p in trainable:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    @staticmethod
    def _make_buckets(params, cap_bytes: float) -> list[FlatBucket]:
        """Consecutive parameters, in reverse order, until a bucket holds cap_bytes or the dtype changes."""
        rank, n = dist.get_rank(), dist.get_world_size()
        buckets, current, size = [], [], 0
        for p in reversed(params):
            if current and p.dtype != current[0].dtype:
                buckets.append(FlatBucket(current, rank, n))
                current, size = [], 0
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= cap_bytes:
                buckets.append(FlatBucket(current, rank, n))
                current, size = [], 0
        if current:
            buckets.append(FlatBucket(current, rank, n))
        return buckets

    def _grad_ready(self, p: torch.Tensor) -> None:
        """Post-accumulate-grad hook, inside backward: p.grad is final."""
        b, i = self.bucket_of[id(p)]
        self.used.add(id(p))
        if b.work is not None:  # a second backward before step(): fold the first one's slice in first
            self._collect(b)
        if b.flat_grad is None:
            b.flat_grad = torch.zeros_like(b.flat)
        b.flat_grad[b.offsets[i]: b.offsets[i] + p.numel()].copy_(p.grad.reshape(-1))
        p.grad = None  # the full gradient is not kept once it is in the bucket: ZeRO-2's saving
        b.ready += 1
        if b.ready == len(b.params):
            self._launch_bucket(b)

    def _launch_bucket(self, b: FlatBucket) -> None:
        raise NotImplementedError("TODO(lab3): Once the bucket's communication completes (the caller waits on what you "
                                  "store as its work), this rank's slice [lo, hi) of the bucket's gradient buffer "
                                  "holds the average over the N ranks of that slice's gradient; the rest of the buffer "
                                  "may hold anything. It must not block: backward goes on meanwhile. Each rank sends "
                                  "S·(N−1)/N of the bucket's S bytes, half an all-reduce. (hints: checker hint lab3 "
                                  "zero2.launch_bucket)")

    def finish_gradient_synchronization(self) -> None:
        """Wait for every bucket's communication; keep only the owned slice; point the pieces' .grad at it."""
        for b in self.buckets:
            if b.ready and b.work is None:  # a parameter unused in this forward: its gradient is zero
                self._launch_bucket(b)
            if b.work is not None:
                self._collect(b)
        for piece, b, start, end, pid in self.pieces:  # no gradient since zero_grad: no step, as torch's optimizers
            piece.grad = None if b.grad_shard is None or pid not in self.used else b.grad_shard[start:end]

    @staticmethod
    def _collect(b: FlatBucket) -> None:
        b.work.wait()
        mine = b.flat_grad[b.lo:b.hi]
        b.grad_shard = mine.clone() if b.grad_shard is None else b.grad_shard.add_(mine)
        b.reset()  # frees the rest of the bucket's gradient buffer

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.finish_gradient_synchronization()
        sync_hyperparameters(self.param_groups, self.optim.param_groups)
        raise NotImplementedError("TODO(lab3): On return every bucket's flat buffer is identical on every rank and "
                                  "holds the updated weights: each rank updated only its own slice [lo, hi) (the local "
                                  "optimizer's tensors are views of it), then every slice reached every rank. Cost: "
                                  "4Ψ·(N−1)/N bytes per rank, the other half of DDP's all-reduce, so the step totals "
                                  "exactly DDP's 8Ψ·(N−1)/N. Keyword arguments given to this step reach the local "
                                  "optimizer's step. (hints: checker hint lab3 zero2.step)")
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for b in self.buckets:
            if set_to_none:
                b.grad_shard = None
            elif b.grad_shard is not None:
                b.grad_shard.zero_()
        for piece, *_ in self.pieces:
            piece.grad = None
        self.used.clear()
        super().zero_grad(set_to_none)  # the model's own .grad (None after each backward's hooks)

    def state_dict(self) -> dict:
        """This rank's shard of the optimizer state (one file per rank, at the same world size)."""
        return self.optim.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optim.load_state_dict(state)
