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
        # BEGIN SOLUTION Returns the full input gradient, identical on every rank of the group, and None for the group.
        #                One X fed every rank's slice, so dL/dX = sum over r of dL/dY_r A_r^T and each rank holds one
        #                term: passed on unsummed, the LayerNorms and embeddings before it get a partial gradient while
        #                the forward still looks right. The incoming buffer is left unmodified (autograd may share it).
        # HINT 1         The forward was the identity on a replicated X that N slices of the layer consumed. What is the
        #                gradient of a value used N times, and where do its pieces live?
        # HINT 2         one collective (sum) over ctx.group, on a contiguous copy of grad; return a pair.
        # HINT 3         grad = grad.contiguous().clone(); dist.all_reduce(grad, group=ctx.group); return grad, None
        grad = grad.contiguous().clone()  # autograd may hand the same buffer to other consumers
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
        # END SOLUTION


class _ReduceFromTP(torch.autograd.Function):
    """g: all-reduce (sum) of the partial outputs in forward; identity in backward."""

    @staticmethod
    def forward(ctx, x, group):
        # BEGIN SOLUTION Returns the sum over the group's ranks of their partial outputs (Z = sum over r of Y_r B_r),
        #                the same full tensor on every rank; the input tensor itself is left unchanged.
        # HINT 1         Each rank computed a partial sum of the row-parallel matmul. What must happen to the partials
        #                for every rank to hold the layer's output?
        # HINT 2         one collective (sum) over `group`, on a contiguous copy of x.
        # HINT 3         out = x.contiguous().clone(); dist.all_reduce(out, group=group); return out
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out
        # END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        # BEGIN SOLUTION Returns the gradient for x, and None for the group. The output was replicated, so dL/dZ is
        #                already complete and identical on every rank, and dL/dY_r = dL/dZ: no communication here (any
        #                would double the backward's collectives: 4 per block instead of 2).
        # HINT 1         The forward summed partials into a replicated Z. Does the gradient of a sum need summing again?
        #                What is the transpose of 'sum over ranks'?
        # HINT 2         the identity: no collective.
        # HINT 3         return grad, None
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
        # BEGIN SOLUTION The module holds only this rank's slice, as Parameters of its own: the weight rows named by
        #                `rows` (the output features it computes), shape (that many, in_features), and the same entries
        #                of the bias (None without one); copies, so that no reference to the full layer survives and a
        #                rank holds 1/N of its bytes.
        # HINT 1         A Linear's weight is (out_features, in_features): which axis indexes the outputs this rank
        #                produces? Why must the slice be a copy and not a view of the full weight?
        # HINT 2         nn.Parameter of linear.weight indexed by rows (detach, clone); the same for the bias when it
        #                exists.
        # HINT 3         self.weight = nn.Parameter(linear.weight.detach()[rows].clone()); self.bias =
        #                nn.Parameter(linear.bias.detach()[rows].clone()) if linear.bias is not None else None
        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = nn.Parameter(linear.bias.detach()[rows].clone()) if linear.bias is not None else None
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION Returns Y_r = X W_r^T + b_r, shape (..., rows kept): this rank's slice of the full layer's
        #                output, with no communication in forward (X is the same on every rank); in backward the
        #                gradient reaching X must be the full one, summed over the ranks, which is the entry op's job.
        # HINT 1         Which of the two conjugate ops stands at the entrance of the parallel region, and what does it
        #                do in forward and in backward?
        # HINT 2         copy_to_tp(x, self.group), then F.linear with this rank's weight and bias.
        # HINT 3         return F.linear of copy_to_tp(x, self.group) with self.weight and self.bias
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
        # BEGIN SOLUTION The module holds, as Parameters of its own, the weight's input columns named by `cols`, shape
        #                (out_features, columns kept), and the whole bias (out_features), both copies: the bias is added
        #                once, after the partial sums are combined, so it is neither split nor divided.
        # HINT 1         The row-parallel matmul splits the sum over input features: which axis of the weight is that?
        #                Is the bias part of that sum, or added after it?
        # HINT 2         nn.Parameter of linear.weight[:, cols] (detach, clone); the bias whole (detach, clone).
        # HINT 3         self.weight = nn.Parameter(linear.weight.detach()[:, cols].clone()); self.bias =
        #                nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None
        self.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION Returns Z = sum over r of X_r W_r^T, plus b once, shape (..., out_features), identical on every
        #                rank: the ranks' partial products are combined over the group and the bias added after (added
        #                before, it would count N times); the gradient reaching X_r is dL/dZ W_r with no further
        #                communication.
        # HINT 1         Which of the two conjugate ops stands at the exit of the parallel region? On which side of it
        #                does the bias go, and what goes wrong on the other side?
        # HINT 2         F.linear without the bias, reduce_from_tp over self.group, then + bias.
        # HINT 3         out = reduce_from_tp(F.linear(x, self.weight), self.group); return out + self.bias if self.bias
        #                is not None else out
        out = reduce_from_tp(F.linear(x, self.weight), self.group)
        return out + self.bias if self.bias is not None else out
        # END SOLUTION
