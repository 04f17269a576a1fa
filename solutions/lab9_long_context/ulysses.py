"""Ulysses (DeepSpeed-Ulysses) sequence parallelism: re-shard from sequence to heads, attend, re-shard back.

    torchrun --nproc_per_node 2 -m solutions.lab9_long_context.ulysses

Heads are independent: attention of one head needs that head's q, k, v for the WHOLE sequence and nothing of the
other heads. Each rank holds s/N rows of every head; one all-to-all turns that into h/N heads of all s rows: rank r
sends rank j its rows of j's heads (a tensor of b*(h/N)*(s/N)*d) and receives j's rows of its own heads. Then
ordinary attention per head (any kernel: the flash one, SDPA), then the inverse all-to-all back to rows.

Bytes each rank sends per layer, forward: q, k, v in and o out, 4 all-to-alls of its b*h*(s/N)*d block, each
sending (N-1)/N of it: 4 (N-1)/N * b*h*s*d*4/N B; backward the same again. That falls as 1/N (the ring's
2(N-1)/N S does not), but there are only h heads to hand out: N <= h, and N must divide h.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def seq_to_heads(x: torch.Tensor, group=None) -> torch.Tensor:
    """(b, h, s/N, d) this rank's rows of every head -> (b, h/N, s, d) every row of this rank's heads."""
    world = dist.get_world_size(group)
    b, h, sl, d = x.shape
    if h % world:
        raise ValueError(f"Ulysses hands out whole heads: {h} heads cannot be split over {world} ranks "
                         "(heads must be a multiple of the ranks; use the ring, or fewer ranks)")
    # BEGIN SOLUTION The result is (b, h/N, s, d): heads r*h/N up to (r+1)*h/N of this rank r, every row of
    #                the sequence in order (rank 0's rows first). Each rank sends each other rank exactly that rank's
    #                heads of its own rows, b*(h/N)*(s/N)*d values per peer, and keeps its own.
    # HINT 1         Which of your values does rank j need, and where in its result do they land?
    # HINT 2         One all-to-all on a single tensor whose leading dimension is the peer: make peer j's heads the
    #                j-th slice before sending, and lay what arrives from peer j at sequence rows j*s/N after.
    # HINT 3         send = x.reshape(b, world, h//world, sl, d).transpose(0, 1).contiguous(); recv = empty_like(send);
    #                dist.all_to_all_single(recv, send, group=group); return recv.permute(1, 2, 0, 3, 4).reshape(
    #                b, h//world, world*sl, d).
    send = x.reshape(b, world, h // world, sl, d).transpose(0, 1).contiguous()  # slice j: peer j's heads
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[j]: peer j's rows of this rank's heads
    return recv.permute(1, 2, 0, 3, 4).reshape(b, h // world, world * sl, d)
    # END SOLUTION


def heads_to_seq(y: torch.Tensor, group=None) -> torch.Tensor:
    """(b, h/N, s, d) every row of this rank's heads -> (b, h, s/N, d) this rank's rows of every head."""
    world = dist.get_world_size(group)
    b, hn, s, d = y.shape
    # BEGIN SOLUTION The result is (b, h, s/N, d): this rank's rows of every head, heads in order — the
    #                exact inverse of the forward re-shard, so heads_to_seq of seq_to_heads of x is x.
    # HINT 1         The inverse of an all-to-all is an all-to-all: which rows does peer j want back, of which heads?
    # HINT 2         Make peer j's sequence rows the j-th slice, all-to-all, and put what arrives from peer j at
    #                head positions j*h/N.
    # HINT 3         send = y.reshape(b, hn, world, s//world, d).permute(2, 0, 1, 3, 4).contiguous(); recv =
    #                empty_like(send); all-to-all; return recv.transpose(0, 1).reshape(b, world*hn, s//world, d).
    send = y.reshape(b, hn, world, s // world, d).permute(2, 0, 1, 3, 4).contiguous()  # slice j: peer j's rows
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[j]: this rank's rows of peer j's heads
    return recv.transpose(0, 1).reshape(b, world * hn, s // world, d)
    # END SOLUTION


class _SeqToHeads(torch.autograd.Function):
    """The re-shard as an autograd op: its gradient is the inverse re-shard of the gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return seq_to_heads(x, group)

    @staticmethod
    def backward(ctx, g):
        return heads_to_seq(g.contiguous(), ctx.group), None


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return heads_to_seq(y, group)

    @staticmethod
    def backward(ctx, g):
        return seq_to_heads(g.contiguous(), ctx.group), None


def ulysses_attention(q, k, v, causal: bool = True, group=None):
    """Attention of the whole sequence for q, k, v (b, h, s/N, d) held as contiguous row blocks (rank r: rows
    r*s/N...); returns this rank's rows of the output, differentiable. Raises ValueError when N does not divide h."""
    if not dist.is_initialized():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    qh, kh, vh = (_SeqToHeads.apply(t, group) for t in (q, k, v))
    return _HeadsToSeq.apply(F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal), group)


def main() -> None:
    from labs.common import dist as cdist

    env = cdist.init(timeout_s=30)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2 * env.world_size, 8 * env.world_size, 8, device=env.device) for _ in range(3))
    n = q.shape[2] // env.world_size
    rows = slice(env.rank * n, (env.rank + 1) * n)
    out = ulysses_attention(q[:, :, rows], k[:, :, rows], v[:, :, rows])
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, rows]
    cdist.log(env, f"max |ulysses - full| on this rank's rows {(out - ref).abs().max().item():.1e}", all_ranks=True)
    cdist.teardown()


if __name__ == "__main__":
    main()
