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
        # BEGIN SOLUTION sum this rank's partial input gradient over the group (dist.all_reduce on a copy: grad may be
        #                shared), return (sum, None)
        grad = grad.contiguous().clone()  # autograd may hand the same buffer to other consumers
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
        # END SOLUTION


class _ReduceFromTP(torch.autograd.Function):
    """g: all-reduce (sum) of the partial outputs in forward; identity in backward."""

    @staticmethod
    def forward(ctx, x, group):
        # BEGIN SOLUTION all-reduce (sum) a copy of the partial output over the group and return it
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out
        # END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        # BEGIN SOLUTION the output is replicated, so its gradient already is: pass it through (grad, None)
        return grad, None
        # END SOLUTION


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
        # BEGIN SOLUTION new Parameters holding only linear.weight[rows] and linear.bias[rows] (copies: the full layer
        #                is dropped afterwards)
        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = nn.Parameter(linear.bias.detach()[rows].clone()) if linear.bias is not None else None
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION F.linear of copy_to_tp(x, self.group) with this rank's weight and bias
        return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)
        # END SOLUTION


class RowParallelLinear(nn.Module):
    """This rank's `cols` of a Linear's input features: Z = g(X_r W[:, cols]^T) + b.

    Input (..., len(cols)), this rank's slice (a column-parallel layer's output); output (..., out_features),
    the same on every rank. The bias is whole on every rank and added after the all-reduce: added
    before, it would be summed N times.
    """

    def __init__(self, linear: nn.Linear, cols: torch.Tensor, group=None):
        super().__init__()
        self.group = group
        # BEGIN SOLUTION Parameters holding linear.weight[:, cols] and the whole bias (copies)
        self.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION reduce_from_tp(F.linear(x, self.weight)) over self.group, then add the bias
        out = reduce_from_tp(F.linear(x, self.weight), self.group)
        return out + self.bias if self.bias is not None else out
        # END SOLUTION
