"""Apply tensor parallelism to the GPT from the outside: `parallelize(model)` swaps Linears for split ones.

    torchrun --nproc_per_node 2 -m solutions.lab6_model_parallel.tp_report --out runs/lab6/tp.json

The model is untouched (labs/common/model.py); per block:
    attn.qkv   -> ColumnParallelLinear over this rank's heads: H/N heads of q, k and v
    attn.proj  -> RowParallelLinear over the same heads' columns
    mlp.fc     -> ColumnParallelLinear, a contiguous 4d/N block of the hidden units
    mlp.proj   -> RowParallelLinear, the matching 4d/N input columns
Embeddings, LayerNorms and the (tied) head stay whole on every rank, and so do their gradients: the
all-reduce in f's backward makes the gradient reaching them complete and identical on every rank, so
unlike DDP no gradient all-reduce is needed after backward.

Attention needs its own forward: the model's splits qkv's output into three d-wide parts and views
them as n_head heads, but a rank now holds 3 * d/N features, H/N heads of each of q, k, v. qkv's weight
rows are [q (d rows) | k (d) | v (d)], head h owning rows h*hd ... (h+1)*hd of each part (hd = d/H),
so rank r's rows are those of heads r*H/N ... (r+1)*H/N in each of the three parts (qkv_rows).

Dropout: the residual dropout after a row-parallel layer acts on replicated activations; every rank
must draw the same mask (same seed, same RNG state). Attention dropout acts on different heads per rank
and needs a per-rank stream (Megatron's RNG tracker). The checks run with dropout 0.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .tp_layers import ColumnParallelLinear, RowParallelLinear


def block_rows(n: int, rank: int, world: int) -> torch.Tensor:
    """Rank r's contiguous 1/N of n features: [r*n/N, (r+1)*n/N)."""
    size = n // world
    return torch.arange(rank * size, (rank + 1) * size)


def qkv_rows(n_embd: int, n_head: int, rank: int, world: int) -> torch.Tensor:
    """Rows of the fused qkv weight (3*n_embd rows) that rank r keeps: its heads of q, then of k, then of v."""
    # BEGIN SOLUTION Returns the indices of the fused qkv weight's rows (3d in all: q rows 0 to d-1, then k, then v)
    #                that rank r keeps: the rows of its heads, r*H/N to (r+1)*H/N - 1, in each of q, k and v, in that
    #                order: 3d/N indices. Whole heads, because attention mixes a head's features. Tiny (d = 64), N = 2:
    #                rank 0 keeps 0-31, 64-95, 128-159.
    # HINT 1         A contiguous 1/N of the 3d rows would give rank 0 all of q and half of k. Where do head h's rows
    #                sit in each of the three parts, and which heads are rank r's?
    # HINT 2         block_rows(n_embd, rank, world) gives one part's rows (whole heads, as n_head % world == 0); offset
    #                by 0, n_embd and 2 * n_embd; torch.cat.
    # HINT 3         part = block_rows(n_embd, rank, world); return torch.cat([part, part + n_embd, part + 2 * n_embd])
    part = block_rows(n_embd, rank, world)
    return torch.cat([part, part + n_embd, part + 2 * n_embd])
    # END SOLUTION


class TPAttention(nn.Module):
    """Causal self-attention over this rank's heads only. qkv: d -> 3 * n_head * head_dim (local heads);
    proj: n_head * head_dim -> d (its output complete on every rank)."""

    def __init__(self, qkv: nn.Module, proj: nn.Module, n_head: int, head_dim: int, dropout: float,
                 resid_drop: nn.Module):
        super().__init__()
        self.qkv, self.proj = qkv, proj
        self.n_head, self.head_dim, self.dropout = n_head, head_dim, dropout  # n_head: this rank's heads
        self.resid_drop = resid_drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # BEGIN SOLUTION Causal self-attention over this rank's heads only: the local qkv output (B, T, 3*width), width
        #                = local heads x head_dim, is cut into q, k and v; each head attends with the causal mask
        #                (dropout only in training); the heads go back to (B, T, width) with each position's heads side
        #                by side; proj and the residual dropout then give the full (B, T, d) on every rank.
        # HINT 1         The model's attention assumes all H heads, width d. What changes when this rank has H/N of
        #                them, and which reshapes depend on that width?
        # HINT 2         CausalSelfAttention.forward in labs/common/model.py as the template: split on dim 2, view (B,
        #                T, heads, hd), transpose(1, 2), F.scaled_dot_product_attention(is_causal=True), transpose back,
        #                proj, resid_drop.
        # HINT 3         width = self.n_head * self.head_dim; q, k, v = self.qkv(x).split(width, dim=2); each .view(B,
        #                T, n_head, head_dim).transpose(1, 2); y = F.scaled_dot_product_attention(q, k, v), causal
        #                (is_causal), with dropout_p = self.dropout if self.training else 0.0; y = y.transpose(1,
        #                2).contiguous().view(B, T, width); return self.resid_drop(self.proj(y))
        width = self.n_head * self.head_dim
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, width)
        return self.resid_drop(self.proj(y))
        # END SOLUTION


def parallelize(model: nn.Module, group=None) -> nn.Module:
    """Split every block's attention (by heads) and MLP (by hidden units) across `group`; in place.

    Parameter names stay the model's (blocks.i.attn.qkv.weight, ...), each holding this rank's shard:
    column-parallel layers their rows, row-parallel layers their weight columns and the whole bias.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    cfg = model.cfg
    if cfg.n_head % world or (4 * cfg.n_embd) % world:
        raise ValueError(f"{world} ranks must divide n_head={cfg.n_head} and 4*n_embd={4 * cfg.n_embd}")
    d, hd = cfg.n_embd, cfg.n_embd // cfg.n_head
    # BEGIN SOLUTION In place, returns the model: in every block attention keeps this rank's H/N whole heads (qkv
    #                column-parallel over their rows, proj row-parallel over the same d/N columns) and the MLP hidden
    #                units [r*4d/N, (r+1)*4d/N) (fc column-, proj row-parallel over the same units). Parameter names
    #                unchanged; 12d^2/N weights per block per rank.
    # HINT 1         A column-parallel layer's output slice must be exactly the next row-parallel layer's input slice.
    #                Which index set ties each pair, and what else does the split attention need to know (heads, head
    #                size, dropout)?
    # HINT 2         TPAttention, ColumnParallelLinear, RowParallelLinear, qkv_rows and block_rows, assigned to
    #                block.attn, block.mlp.fc and block.mlp.proj (MLP.forward is unchanged: GELU is elementwise).
    # HINT 3         for block in model.blocks: a = block.attn; block.attn = TPAttention(ColumnParallelLinear(a.qkv,
    #                qkv_rows(d, cfg.n_head, rank, world), group), RowParallelLinear(a.proj, block_rows(d, rank, world),
    #                group), cfg.n_head // world, hd, a.dropout, a.resid_drop); hidden = block_rows(4 * d, rank, world);
    #                block.mlp.fc = ColumnParallelLinear(block.mlp.fc, hidden, group); block.mlp.proj =
    #                RowParallelLinear(block.mlp.proj, hidden, group); return model
    for block in model.blocks:
        a = block.attn
        block.attn = TPAttention(ColumnParallelLinear(a.qkv, qkv_rows(d, cfg.n_head, rank, world), group),
                                 RowParallelLinear(a.proj, block_rows(d, rank, world), group),
                                 cfg.n_head // world, hd, a.dropout, a.resid_drop)
        hidden = block_rows(4 * d, rank, world)
        block.mlp.fc = ColumnParallelLinear(block.mlp.fc, hidden, group)   # MLP.forward is unchanged:
        block.mlp.proj = RowParallelLinear(block.mlp.proj, hidden, group)  # gelu is elementwise
    return model
    # END SOLUTION
