# GENERATED from solutions/lab6_model_parallel/tensor_parallel.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Apply tensor parallelism to the GPT from the outside: `parallelize(model)` swaps Linears for split ones.

    torchrun --nproc_per_node 2 -m labs.lab6_model_parallel.tp_report --out runs/lab6/tp.json

The model is untouched (labs/common/model.py). In every block, attention is split by whole heads and the MLP
by hidden units, each rank's share in the course's layout (the checker compares every shard with its slice of
the unsplit tensor): rank r holds the r-th contiguous block of H/N heads and the r-th contiguous block of 4d/N
hidden units. Which of a block's four Linears is column- and which row-parallel follows from tp_layers.py's
Y = X A, Z = Y B. Embeddings, LayerNorms and the (tied) head stay whole on every rank, and so must their
gradients be, complete and identical on every rank, without any gradient all-reduce after backward (unlike
DDP): the split layers' own communication has to see to it.

Attention needs its own forward (TPAttention): the model's assumes all n_head heads, d features wide, and a
rank now holds H/N of them. Which rows of the fused qkv weight belong to which head of q, k and v is the
model's own layout: read it off CausalSelfAttention.forward in labs/common/model.py.

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
    raise NotImplementedError("TODO(lab6): Returns the indices of the rows of the fused qkv weight (3d rows: d of q, d "
                              "of k, d of v) that rank r keeps: exactly the rows of its own heads, the r-th contiguous "
                              "block of H/N heads, in each of q, k and v; listed as its rows of q, then of k, then of "
                              "v, each part in increasing order: 3d/N indices (the checker compares the shard row by "
                              "row with the unsplit weight at these indices). Whole heads, because attention mixes a "
                              "head's features. Check yourself before running: at d = 12, H = 6, N = 3, which rows are "
                              "rank 1's? (hints: checker hint lab6 tensor_parallel.qkv_rows)")


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
        raise NotImplementedError("TODO(lab6): Returns (B, T, d), on every rank the unsplit attention layer's output "
                                  "for x (with the residual dropout). This rank's qkv gives, per position, its own "
                                  "self.n_head heads (H/N of the model's H) of q, then of k, then of v, head_dim "
                                  "features each; every head attends causally (dropout on the attention weights in "
                                  "training only); proj expects those heads' outputs side by side per position, in "
                                  "head order, self.n_head x head_dim features wide. (hints: checker hint lab6 "
                                  "tensor_parallel.forward)")


def parallelize(model: nn.Module, group=None) -> nn.Module:
    """Split every block's attention (by heads) and MLP (by hidden units) across `group`; in place.

    Parameter names stay the model's (blocks.i.attn.qkv.weight, ...), each holding this rank's shard.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    cfg = model.cfg
    if cfg.n_head % world or (4 * cfg.n_embd) % world:
        raise ValueError(f"{world} ranks must divide n_head={cfg.n_head} and 4*n_embd={4 * cfg.n_embd}")
    d, hd = cfg.n_embd, cfg.n_embd // cfg.n_head
    raise NotImplementedError("TODO(lab6): In place, returns the model, whose logits, loss and every gradient then "
                              "equal the unsplit model's on every rank (within 1e-5). In every block each rank holds "
                              "only its shard, as Parameters under the model's names (blocks.i.attn.qkv.weight, ...): "
                              "attention by whole heads, rank r the r-th contiguous block of H/N; the MLP by hidden "
                              "units, rank r the r-th contiguous block of 4d/N; in each pair of Linears the second "
                              "consumes exactly the features the first produced. 12d^2/N weights per block per rank, 4 "
                              "all-reduces per block per step. (hints: checker hint lab6 tensor_parallel.parallelize)")
