"""Expert parallelism: E experts spread over N ranks, tokens sent to their experts by all-to-all, and back.

    torchrun --nproc_per_node 2 -m solutions.lab10_moe.expert_parallel   # checks itself against one process

Rank r of the EP group holds experts r*E/N .. (r+1)*E/N - 1 (their w1, w2) and its own tokens. After routing,
each rank has, for every expert, the rows of its tokens that chose it (dropped choices stay home). Those rows must
reach their expert's rank, be computed there together with every other rank's rows for that expert, and come back
weighted into their own token's output, exactly as on one process. Two things to settle before writing it: a
receiver cannot size its buffer until it knows how many rows are coming, and autograd must carry each row's
gradient back along the path the row took.

Capacity is counted on each rank's own tokens (C from its T), so each rank's output equals the one-process
layer applied to that rank's tokens: the dense layer per group, as Switch and GShard define it.

Bytes each rank sends per layer (fp32, h wide rows): the trip out (dispatch) and the trip back (combine) each
send the rows bound for other ranks, ~T k (N-1)/N of them when routing is even, 4 h B each: 2 * T k h 4 (N-1)/N
forward, the same backward, plus E int64 counts. T = 4096, k = 2, h = 768, N = 8: 2 * 4096*2*768*4 * 7/8 = 44 MB
per layer forward.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from .moe import MoE, expert_mlp


def exchange_counts(send_counts: torch.Tensor, group=None) -> torch.Tensor:
    """send_counts (E,) rows this rank sends to each expert -> (N, E/N): [j, e] rows rank j sends to this rank's
    local expert e."""
    world = dist.get_world_size(group)
    # BEGIN SOLUTION The result's row j holds, for each of this rank's E/N experts, how many rows rank j will send
    #                it: what every receiver needs before any row moves. One collective, E integers per rank.
    # HINT 1         Rank j knows how many rows it sends to each of your experts; you do not. Which slice of
    #                its counts must reach you?
    # HINT 2         An all-to-all of equal slices: the counts of experts r*E/N..(r+1)*E/N-1 go to rank r.
    # HINT 3         recv = torch.empty_like(send_counts); dist.all_to_all_single(recv, send_counts, group=group);
    #                return recv.view(world, -1).
    recv = torch.empty_like(send_counts)
    dist.all_to_all_single(recv, send_counts.contiguous(), group=group)
    return recv.view(world, -1)
    # END SOLUTION


class AllToAll(torch.autograd.Function):
    """Rows x (sum(send), h) -> (sum(recv), h): send[j] rows to rank j, recv[j] rows from it, rank order."""

    @staticmethod
    def forward(ctx, x, send: list[int], recv: list[int], group):
        ctx.send, ctx.recv, ctx.group = send, recv, group
        out = x.new_empty(sum(recv), x.shape[1])
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        # BEGIN SOLUTION The gradient of the rows this rank sent: row i's gradient is the gradient of the row
        #                it became on the receiving rank, brought back to this rank, in the order it was sent.
        # HINT 1         Forward moved send[j] rows to rank j. Where is the gradient of those rows now?
        # HINT 2         The same collective, run the other way: the splits swap.
        # HINT 3         gx = g.new_empty(sum(ctx.send), g.shape[1]); dist.all_to_all_single(gx, g.contiguous(),
        #                ctx.send, ctx.recv, group=ctx.group); return gx, None, None, None.
        gx = g.new_empty(sum(ctx.send), g.shape[1])
        dist.all_to_all_single(gx, g.contiguous(), ctx.send, ctx.recv, group=ctx.group)
        return gx, None, None, None
        # END SOLUTION


class ExpertParallelMoE(nn.Module):
    """An MoE layer whose experts are spread over `group`: the same router (replicated), this rank's E/N experts'
    w1, w2 (names unchanged, shapes (E/N, h, f) and (E/N, f, h)), the same bias buffer (E,)."""

    def __init__(self, moe: MoE, group=None):
        super().__init__()
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        if moe.n_experts % world:
            raise ValueError(f"{moe.n_experts} experts do not split over {world} ranks: make E a multiple of N")
        per = moe.n_experts // world
        self.n_experts, self.k, self.capacity_factor, self.group = moe.n_experts, moe.k, moe.capacity_factor, group
        self.router = moe.router
        self.w1 = nn.Parameter(moe.w1.detach()[rank * per:(rank + 1) * per].clone())
        self.w2 = nn.Parameter(moe.w2.detach()[rank * per:(rank + 1) * per].clone())
        self.register_buffer("bias", moe.bias.detach().clone())
        self.aux_loss, self.counts = moe.aux_loss, moe.counts

    gate = MoE.gate  # routing is the one-process layer's, on this rank's tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xt = x.reshape(-1, x.shape[-1])
        ids, w, keep = self.gate(xt)
        world, per = dist.get_world_size(self.group), self.n_experts // dist.get_world_size(self.group)
        # BEGIN SOLUTION This rank's output rows equal MoE.forward of its own tokens (with the full set of experts):
        #                every kept choice's row is computed by its expert on the expert's rank, weighted and added
        #                into its token's output here; dropped choices add nothing. Rows travel by all-to-all (the
        #                counts first), each expert runs once per forward on every row it received, and gradients
        #                reach x, the router and this rank's w1, w2 (other ranks' tokens included).
        # HINT 1         What must the receiving rank know before rows arrive? In what order must the rows you send
        #                be for a single collective to deliver them? And how do you put results back where they
        #                came from?
        # HINT 2         Sort the kept (token, choice) pairs by expert; per-expert counts -> exchange_counts; rows by
        #                AllToAll with per-rank splits; on arrival, a row's local expert follows from the received
        #                counts (rank-major, then expert); run each local expert on its rows; AllToAll back with the
        #                splits swapped; index_add weighted rows into the tokens' outputs.
        # HINT 3         t, j = keep.nonzero(as_tuple=True); e = ids[t, j]; o = argsort(e, stable=True); t, j, e =
        #                t[o], j[o], e[o]; sc = bincount(e, minlength=E); rc = exchange_counts(sc, group); send =
        #                sc.view(N, -1).sum(1).tolist(); recv = rc.sum(1).tolist(); rows = AllToAll.apply(xt[t], send,
        #                recv, group); local = arange(E/N).repeat(N).repeat_interleave(rc.flatten()); for each local
        #                expert el: idx = (local == el).nonzero()[:, 0]; y = y.index_add(0, idx, expert_mlp(rows[idx],
        #                w1[el], w2[el])); back = AllToAll.apply(y, recv, send, group); out = zeros_like(xt)
        #                .index_add(0, t, back * w[t, j, None]).
        t, j = keep.nonzero(as_tuple=True)
        e = ids[t, j]
        order = torch.argsort(e, stable=True)  # grouped by expert, hence by destination rank
        t, j, e = t[order], j[order], e[order]
        send_counts = torch.bincount(e, minlength=self.n_experts)
        recv_counts = exchange_counts(send_counts, self.group)  # (N, E/N)
        send, recv = send_counts.view(world, per).sum(1).tolist(), recv_counts.sum(1).tolist()
        rows = AllToAll.apply(xt[t], send, recv, self.group)
        local = torch.arange(per, device=x.device).repeat(world).repeat_interleave(recv_counts.flatten())
        y = torch.zeros_like(rows)
        for el in range(per):  # E/N grouped matmuls, whatever the number of tokens
            idx = (local == el).nonzero(as_tuple=True)[0]
            y = y.index_add(0, idx, expert_mlp(rows[idx], self.w1[el], self.w2[el]))
        back = AllToAll.apply(y, recv, send, self.group)
        return torch.zeros_like(xt).index_add(0, t, back * w[t, j, None].to(xt.dtype)).view_as(x)
        # END SOLUTION


def expert_parallel(moe: MoE, group=None) -> ExpertParallelMoE:
    """The EP version of a one-process MoE layer (same weights; this rank keeps its E/N experts)."""
    return ExpertParallelMoE(moe, group)


def apply_expert_parallel(model: nn.Module, group=None) -> nn.Module:
    """In place: every block's MoE layer becomes its EP version over `group` (apply_moe first)."""
    for block in model.blocks:
        block.mlp = expert_parallel(block.mlp, group)
    return model


def main() -> None:
    """Each rank: its own tokens through the EP layer vs the one-process layer, and the bytes it sent against the
    prediction from its routing (kept rows bound for other ranks + results returned, 4h B each)."""
    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    env = cdist.init()
    comm = CommBytes()
    h, per, tokens = 16, 2, 64
    torch.manual_seed(0)  # the same layer on every rank
    moe = MoE(h, n_experts=per * env.world_size, k=2, ffn=32, capacity_factor=1.25).to(env.device)
    torch.manual_seed(1 + env.rank)  # each rank its own tokens
    x = torch.randn(tokens, h, device=env.device)
    want = moe(x)
    layer = expert_parallel(moe, None)
    comm.start()
    got = layer(x)
    sent = sum(r[2] for r in comm.stop())
    ids, _, keep = moe.gate(x)
    elsewhere = (ids // per != env.rank) & keep  # kept choices whose expert lives on another rank
    rows_out = torch.tensor([int(elsewhere.sum())], device=env.device)
    to_rank = ((ids // per).unsqueeze(-1) == torch.arange(env.world_size, device=env.device)) & keep.unsqueeze(-1)
    arriving = to_rank.sum((0, 1))  # kept rows this rank sends to each rank (its own included)
    dist.all_reduce(arriving)  # summed over the senders: the rows each rank receives
    back = int(arriving[env.rank]) - int((keep & (ids // per == env.rank)).sum())  # results returned to peers
    predicted = (int(rows_out) + back) * 4 * h
    print(f"rank {env.rank}: EP vs one process {(got - want).abs().max().item():.1e}; sent {sent:,.0f} B forward, "
          f"predicted {predicted:,} B + counts ({int(rows_out)} rows out, {back} back, {4 * h} B each)")
    comm.uninstall()
    cdist.teardown()


if __name__ == "__main__":
    main()
