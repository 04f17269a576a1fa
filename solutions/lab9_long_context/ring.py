"""Ring attention (context parallelism): each rank holds s/N of the sequence, K and V travel round the ring.

    torchrun --nproc_per_node 2 -m solutions.lab9_long_context.ring    # compares with full attention on every rank
    python -m solutions.lab9_long_context.ring                        # one process: the ring of one is flash

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
    # BEGIN SOLUTION Returns (buffer, handles) without waiting for any byte to move: the transfer of send to global
    #                rank `to` and of a tensor of send's shape and dtype from global rank frm into buffer are both
    #                under way, in the background, while the caller goes on computing; buffer holds what frm sent
    #                once every handle has been waited for. Both directions start together, so neighbours that send
    #                to each other (at N = 2 the next and the previous rank are one) never wait on each other.
    #                Point-to-point only: the checker counts the bytes handed to these sends.
    # HINT 1         What happens when every rank of the ring first sends, blocking, and only then receives? And what
    #                must the caller be able to do between starting a transfer and needing what it brings?
    # HINT 2         torch.distributed's non-blocking point-to-point: one operation that sends, one that receives into a
    #                fresh tensor like send, launched together (dist.P2POp for each, dist.batch_isend_irecv); the work
    #                handles it returns are what the caller waits on later.
    # HINT 3         recv = torch.empty_like(send); ops = [dist.P2POp(dist.isend, send, to, group),
    #                dist.P2POp(dist.irecv, recv, frm, group)]; return recv, dist.batch_isend_irecv(ops).
    recv = torch.empty_like(send)
    ops = [dist.P2POp(dist.isend, send, to, group), dist.P2POp(dist.irecv, recv, frm, group)]
    return recv, dist.batch_isend_irecv(ops)
    # END SOLUTION


def _wait(handles) -> None:
    for h in handles:
        h.wait()


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, group, block):
        rank, world, nxt, prv = _peers(group)
        s = q.shape[2] * world
        q_pos = positions(s, rank, world, layout, q.device)
        # BEGIN SOLUTION When forward returns, out and lse are attention of this rank's queries over every rank's keys
        #                and its log-sum-exp (backward reuses both), equal to full attention's rows. Meanwhile a rank
        #                never holds more than two K/V blocks, exchanges them only with its two ring neighbours, and
        #                sends 2(N-1)/N of K and V in all, nothing else; every transfer is in flight while tile matmuls
        #                run (the checker times each receive against the matmuls); causal masks compare global
        #                positions, as the layout places each rank's rows.
        # HINT 1         At step t, whose K/V block does this rank hold, and which positions do its rows have? What must
        #                already be on its way before you spend time on that block's tiles, and what is left to send at
        #                the last step?
        # HINT 2         N steps; the block held travels one hop round the ring per step (K and V as one message). Each
        #                step: start the shift to rank+1 / from rank-1 (not at the last step), run flash's tile function
        #                on the held block with both sides' global positions, merge into what is held so far, then wait
        #                and swap buffers.
        # HINT 3         kv = torch.stack([k, v]); out = lse = None; for step in range(world): src = (rank - step) %
        #                world (whose block is held); if step < world-1: nxt_kv, handles = _shift(kv, nxt, prv, group);
        #                o_i, lse_i = attend(q, K and V of the held block, q_pos, the global positions of rank src's
        #                rows (zigzag.positions), causal, block, block); out, lse = (o_i, lse_i) if out is None else
        #                merge(out, lse, o_i, lse_i); if step < world-1: _wait(handles); kv = nxt_kv.
        kv = torch.stack([k, v])  # one message per hop
        out = lse = None
        for step in range(world):
            src = (rank - step) % world  # whose K/V block this rank holds at this step
            if step < world - 1:
                nxt_kv, handles = _shift(kv, nxt, prv, group)  # in flight during this step's tiles
            o_i, lse_i = attend(q, kv[0], kv[1], q_pos, positions(s, src, world, layout, q.device), causal, block,
                                block)
            out, lse = (o_i, lse_i) if out is None else merge(out, lse, o_i, lse_i)
            if step < world - 1:
                _wait(handles)
                kv = nxt_kv
        # END SOLUTION
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
        # BEGIN SOLUTION Returns this rank's dq, dk, dv (then nothing for the four settings): dq over every rank's
        #                keys, and dk, dv the gradient of this rank's own K/V block summed over every rank's queries. A
        #                rank can compute only its own queries' share of any block's gradient, so the shares must meet,
        #                and end on the block's owner. Bytes per rank: the K/V blocks as in forward, 2(N-1)/N of K and
        #                V, plus dK and dV once round the ring, 2S; neighbours only, nothing else sent.
        # HINT 1         Each rank can compute only its own queries' share of a block's gradient. Where is the
        #                rest of that block's gradient, and in which direction and how many hops must the running
        #                sum travel so that it ends at the block's owner?
        # HINT 2         As in forward, start the next K/V block's transfer, run flash's tile backward on the held
        #                block with the final lse; then add this step's dK, dV to the running sum received from the
        #                previous rank (zero at step 0) and send it on, one hop per step: N hops; after the last step
        #                the sum that arrives is this rank's own block's gradient.
        # HINT 3         dq = zeros_like(q); kv, pending = stack of k and v, None; for step in range(world): src = (rank
        #                - step) % world; if step < world-1: nxt_kv, handles = _shift(kv, nxt, prv, group); dq_i, dk_i,
        #                dv_i = attend_backward(q, kv[0], kv[1], out, lse, do, q_pos, positions(..., src, ...), causal,
        #                block, block); dq += dq_i; dkv = stack of dk_i and dv_i; if pending: recv, hs = pending;
        #                _wait(hs); dkv = dkv + recv; pending = _shift(dkv, nxt, prv, group); if step < world-1:
        #                _wait(handles); kv = nxt_kv. After the loop: dkv, hs = pending; _wait(hs); return dq, dkv[0],
        #                dkv[1], None x 4.
        dq = torch.zeros_like(q)
        kv, pending = torch.stack([k, v]), None
        for step in range(world):
            src = (rank - step) % world
            if step < world - 1:
                nxt_kv, handles = _shift(kv, nxt, prv, group)
            dq_i, dk_i, dv_i = attend_backward(q, kv[0], kv[1], out, lse, do, q_pos,
                                               positions(s, src, world, layout, q.device), causal, block, block)
            dq += dq_i
            dkv = torch.stack([dk_i, dv_i])
            if pending is not None:  # the running sum of block src's gradient, from the ranks before this one
                recv, hs = pending
                _wait(hs)
                dkv = dkv + recv
            pending = _shift(dkv, nxt, prv, group) if world > 1 else (dkv, [])
            if step < world - 1:
                _wait(handles)
                kv = nxt_kv
        dkv, hs = pending
        _wait(hs)
        return dq, dkv[0], dkv[1], None, None, None, None
        # END SOLUTION


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
