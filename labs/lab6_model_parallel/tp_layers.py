# GENERATED from solutions/lab6_model_parallel/tp_layers.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Tensor parallelism by hand: a Linear split across N ranks, and the two collectives that keep it exact.

Megatron-LM's split of a d -> 4d -> d MLP (Shoeybi et al., 2019), for Y = X A then Z = Y B:
    column-parallel A = [A_0 | A_1 | ...]    rank r computes Y_r = X A_r: its slice of Y's last dim,
                                             no communication (X is the same on every rank)
    row-parallel    B = [B_0; B_1; ...]      Z = sum_r Y_r B_r: each rank a partial sum, ONE all-reduce
The nonlinearity between them (GELU) is elementwise, so it applies to each slice Y_r alone. Attention
splits the same way by heads: q, k, v column-parallel (whole heads per rank), the output proj row-parallel.

Two conjugate autograd functions carry the communication (Megatron calls them f and g):
    f = copy_to_tp       forward: identity            backward: all-reduce   (entering the parallel part)
    g = reduce_from_tp   forward: all-reduce          backward: identity     (leaving it)
Why f's backward all-reduces: X fed every rank's A_r, so dL/dX = sum_r dL/dY_r A_r^T, and each rank
holds only its own term. Why g's backward is the identity: Z is replicated, so dL/dZ already is.
Each is the other's transpose; get one backwards and the layers before it (LayerNorm, embeddings)
receive a partial gradient, while the forward output still looks right.

Per block per step: 2 all-reduces forward (g after attention, g after the MLP) + 2 backward (f before
each), each of B*T*d activations: tiny at B=4, T=64, d=64 -> 64 KB each. The weights never move.
Bytes per rank: column-parallel d -> 4d holds 4d*d/N weights + 4d/N bias; row-parallel 4d -> d holds
4d*d/N weights + the whole bias d (it is added once, after the sum). tiny block: 49,600/N + 128 floats.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class _CopyToTP(torch.autograd.Function):
    """f: identity in forward; all-reduce (sum) of the input gradient in backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)  # a view, not x itself: autograd needs a new tensor to hang this node on

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("TODO(lab6): Returns the full input gradient, identical on every rank of the group, "
                                  "and None for the group. One X fed every rank's slice, so dL/dX = sum over r of "
                                  "dL/dY_r A_r^T and each rank holds one term: passed on unsummed, the LayerNorms and "
                                  "embeddings before it get a partial gradient while the forward still looks right. "
                                  "The incoming buffer is left unmodified (autograd may share it). (hints: checker "
                                  "hint lab6 tp_layers.CopyToTP.backward)")


class _ReduceFromTP(torch.autograd.Function):
    """g: all-reduce (sum) of the partial outputs in forward; identity in backward."""

    @staticmethod
    def forward(ctx, x, group):
        raise NotImplementedError("TODO(lab6): Returns the sum over the group's ranks of their partial outputs (Z = "
                                  "sum over r of Y_r B_r), the same full tensor on every rank; the input tensor itself "
                                  "is left unchanged. (hints: checker hint lab6 tp_layers.ReduceFromTP.forward)")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("TODO(lab6): Returns the gradient for x, and None for the group. The output was "
                                  "replicated, so dL/dZ is already complete and identical on every rank, and dL/dY_r = "
                                  "dL/dZ: no communication here (any would double the backward's collectives: 4 per "
                                  "block instead of 2). (hints: checker hint lab6 tp_layers.ReduceFromTP.backward)")


def copy_to_tp(x: torch.Tensor, group=None) -> torch.Tensor:
    return _CopyToTP.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group=None) -> torch.Tensor:
    return _ReduceFromTP.apply(x, group)


class ColumnParallelLinear(nn.Module):
    """This rank's `rows` of a Linear's output features: Y_r = f(X) W[rows]^T + b[rows].

    Input (..., in_features), the same on every rank; output (..., len(rows)), this rank's slice.
    `rows` is an index tensor: a contiguous block for the MLP, this rank's heads of q, k and v for attention.
    """

    def __init__(self, linear: nn.Linear, rows: torch.Tensor, group=None):
        super().__init__()
        self.group = group
        raise NotImplementedError("TODO(lab6): The module holds only this rank's slice, as Parameters of its own: the "
                                  "weight rows named by `rows` (the output features it computes), shape (that many, "
                                  "in_features), and the same entries of the bias (None without one); copies, so that "
                                  "no reference to the full layer survives and a rank holds 1/N of its bytes. (hints: "
                                  "checker hint lab6 tp_layers.ColumnParallelLinear)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("TODO(lab6): Returns Y_r = X W_r^T + b_r, shape (..., rows kept): this rank's slice "
                                  "of the full layer's output, with no communication in forward (X is the same on "
                                  "every rank); in backward the gradient reaching X must be the full one, summed over "
                                  "the ranks, which is the entry op's job. (hints: checker hint lab6 "
                                  "tp_layers.ColumnParallelLinear.forward)")


class RowParallelLinear(nn.Module):
    """This rank's `cols` of a Linear's input features: Z = g(X_r W[:, cols]^T) + b.

    Input (..., len(cols)), this rank's slice (a column-parallel layer's output); output (..., out_features),
    the same on every rank. The bias is whole on every rank and added after the all-reduce: added
    before, it would be summed N times.
    """

    def __init__(self, linear: nn.Linear, cols: torch.Tensor, group=None):
        super().__init__()
        self.group = group
        raise NotImplementedError("TODO(lab6): The module holds, as Parameters of its own, the weight's input columns "
                                  "named by `cols`, shape (out_features, columns kept), and the whole bias "
                                  "(out_features), both copies: the bias is added once, after the partial sums are "
                                  "combined, so it is neither split nor divided. (hints: checker hint lab6 "
                                  "tp_layers.RowParallelLinear)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("TODO(lab6): Returns Z = sum over r of X_r W_r^T, plus b once, shape (..., "
                                  "out_features), identical on every rank: the ranks' partial products are combined "
                                  "over the group and the bias added after (added before, it would count N times); the "
                                  "gradient reaching X_r is dL/dZ W_r with no further communication. (hints: checker "
                                  "hint lab6 tp_layers.RowParallelLinear.forward)")
