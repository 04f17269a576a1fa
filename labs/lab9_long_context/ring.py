# GENERATED from solutions/lab9_long_context/ring.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Ring attention (context parallelism): each rank holds s/N of the sequence, K and V travel round the ring.

    torchrun --nproc_per_node 2 -m labs.lab9_long_context.ring    # compares with full attention on every rank
    python -m labs.lab9_long_context.ring                        # one process: the ring of one is flash

Attention is a sum over keys, and flash.merge combines the outputs of disjoint key sets exactly given each set's
log-sum-exp. So the keys never need to meet in one place: each rank keeps its own queries, and over N steps
meets every rank's K/V block, exchanging blocks only with its two neighbours on the ring and never holding more
than two K/V blocks at once (the one it computes on and the one arriving). The transfers cost nothing if they
run while the CPU/GPU computes: communication is hidden when one block's attention (4*b*h*(s/N)^2*d FLOPs) takes
longer than sending one K/V block (2*b*h*(s/N)*d*4 B), i.e. when s/N > 2 * FLOP/s / (bytes/s) (for an H100 pair
on NVLink, 1e15 FLOP/s / 4.5e11 B/s: s/N of a few thousand). How the steps go, and in which order a step starts,
computes and waits, is forward's to derive.

Bytes each rank sends per attention layer (S = bytes of the whole K, the same for V):
    forward   K and V blocks, N-1 hops:                     2 (N-1)/N S   (all-gather of K and V: the same bytes,
                                                                           but all of K and V held at once)
    backward  K and V again, N-1 hops, and every rank's     2 (N-1)/N S + 2 S
              share of dK, dV summed on the block's owner
Causal masking is in GLOBAL positions (zigzag.positions): a block from later in the sequence is skipped tile by
tile, but still forwarded. With the contiguous layout rank N-1 computes N block pairs and rank 0 one; the zig-zag
layout evens it out.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .flash import BLOCK, attend, attend_backward, merge
from .zigzag import positions


def _peers(group):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    glob = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    return rank, world, glob((rank + 1) % world), glob((rank - 1) % world)


def _shift(send: torch.Tensor, to: int, frm: int, group=None):
    """Start sending `send` to (global) rank `to` and receiving a tensor like it from `frm`: (buffer, handles)."""
    raise NotImplementedError("TODO(lab9): Returns (buffer, handles) without waiting for any byte to move: the "
                              "transfer of send to global rank `to` and of a tensor of send's shape and dtype from "
                              "global rank frm into buffer are both under way, in the background, while the caller "
                              "goes on computing; buffer holds what frm sent once every handle has been waited for. "
                              "Both directions start together, so neighbours that send to each other (at N = 2 the "
                              "next and the previous rank are one) never wait on each other. Point-to-point only: the "
                              "checker counts the bytes handed to these sends. (hints: checker hint lab9 ring.shift)")


def _wait(handles) -> None:
    for h in handles:
        h.wait()


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, group, block):
        rank, world, nxt, prv = _peers(group)
        s = q.shape[2] * world
        q_pos = positions(s, rank, world, layout, q.device)
        raise NotImplementedError("TODO(lab9): When forward returns, out and lse are attention of this rank's queries "
                                  "over every rank's keys and its log-sum-exp (backward reuses both), equal to full "
                                  "attention's rows. Meanwhile a rank never holds more than two K/V blocks, exchanges "
                                  "them only with its two ring neighbours, and sends 2(N-1)/N of K and V in all, "
                                  "nothing else; every transfer is in flight while tile matmuls run (the checker times "
                                  "each receive against the matmuls); causal masks compare global positions, as the "
                                  "layout places each rank's rows. (hints: checker hint lab9 ring.forward)")
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (causal, layout, group, block)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        causal, layout, group, block = ctx.settings
        rank, world, nxt, prv = _peers(group)
        s = q.shape[2] * world
        q_pos = positions(s, rank, world, layout, q.device)
        do = do.contiguous()
        raise NotImplementedError("TODO(lab9): Returns this rank's dq, dk, dv (then nothing for the four settings): dq "
                                  "over every rank's keys, and dk, dv the gradient of this rank's own K/V block summed "
                                  "over every rank's queries. A rank can compute only its own queries' share of any "
                                  "block's gradient, so the shares must meet, and end on the block's owner. Bytes per "
                                  "rank: the K/V blocks as in forward, 2(N-1)/N of K and V, plus dK and dV once round "
                                  "the ring, 2S; neighbours only, nothing else sent. (hints: checker hint lab9 "
                                  "ring.backward)")


def ring_attention(q, k, v, causal: bool = True, layout: str = "contiguous", group=None, block: int = BLOCK):
    """Attention of this rank's rows of q over the keys of EVERY rank. q, k, v (b, h, s/N, d): this rank's rows in
    `layout` ("contiguous": rows r*s/N..; "zigzag": chunks r and 2N-1-r of 2N); returns this rank's rows of the output.
    Differentiable: backward gives this rank's rows of dq, dk, dv. Every rank of `group` calls it together."""
    if not dist.is_initialized():
        group = None
        from .flash import flash_attention
        if layout != "contiguous":
            raise ValueError("one process: the layout is the sequence itself ('contiguous')")
        return flash_attention(q, k, v, causal, block, block)
    return RingAttention.apply(q, k, v, causal, layout, group, block)


def main() -> None:
    import torch.nn.functional as F

    from labs.common import dist as cdist

    from .zigzag import zigzag_shard

    env = cdist.init(timeout_s=30)
    torch.manual_seed(0)  # the same full tensors on every rank
    q, k, v = (torch.randn(1, 2, 16 * env.world_size, 8, device=env.device, requires_grad=True) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for layout in ("contiguous", "zigzag"):
        def shard(t, layout=layout):
            n = t.shape[2] // env.world_size
            return zigzag_shard(t, env.rank, env.world_size) if layout == "zigzag" else \
                t[:, :, env.rank * n:(env.rank + 1) * n]
        local = [shard(t).detach().requires_grad_() for t in (q, k, v)]
        out = ring_attention(*local, causal=True, layout=layout)
        cdist.log(env, f"{layout}: max |ring - full| on this rank's rows {(out - shard(ref)).abs().max().item():.1e}",
                  all_ranks=True)
    cdist.teardown()


if __name__ == "__main__":
    main()
