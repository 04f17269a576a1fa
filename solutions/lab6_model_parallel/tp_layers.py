"""Tensor parallelism by hand: a Linear split across N ranks, and the two autograd ops that keep it exact.

Megatron-LM's split of a d -> 4d -> d MLP (Shoeybi et al., 2019), for Y = X A then Z = Y B:
    column-parallel A = [A_0 | A_1 | ...]    rank r computes Y_r = X A_r: its slice of Y's last dim
                                             (X is the same on every rank)
    row-parallel    B = [B_0; B_1; ...]      Z = sum_r Y_r B_r: rank r can compute one term of the sum
The nonlinearity between them (GELU) is elementwise, so it applies to each slice Y_r alone. Attention
splits the same way by heads.

Two conjugate autograd functions, one at each border of the split region, carry all the communication
(Megatron calls them f and g); each is the other's transpose. What each rank holds on each side of them:
    f = copy_to_tp, entering     forward   in: X, the same on every rank   out: the X rank r's A_r consumes
                                 backward  in: the gradient of rank r's own use of X
                                           out: dL/dX, complete, the same on every rank
    g = reduce_from_tp, leaving  forward   in: rank r's term Y_r B_r       out: Z, the same on every rank
                                 backward  in: dL/dZ, the same on every rank (everything after Z runs alike)
                                           out: the gradient of rank r's term
Which of the four needs a collective, and which one, is yours to derive. Get one backward wrong and the
layers before the split region (LayerNorm, embeddings) receive a wrong gradient while the forward output
still looks right.

Per block per step the checker counts every collective, in forward and in backward: 2 each way in all (the
attention's pair and the MLP's), each of B*T*d activations: tiny at B=4, T=64, d=64 -> 64 KB each. The weights
never move.
Bytes per rank: column-parallel d -> 4d holds 4d*d/N weights + 4d/N bias; row-parallel 4d -> d holds
4d*d/N weights + the whole bias d (it is added once, to the sum). tiny block: 49,600/N + 128 floats.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class _CopyToTP(torch.autograd.Function):
    """f, entering the split region: forward hands its input on unchanged; backward is yours (the module's table)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)  # a view, not x itself: autograd needs a new tensor to hang this node on

    @staticmethod
    def backward(ctx, grad):
        # BEGIN SOLUTION Returns dL/dX and None for the group, where dL/dX is the complete gradient of the loss with
        #                respect to f's input X, the same tensor on every rank of the group. What this rank's `grad`
        #                holds: the gradient through its own slice of the layer only, since X fed every rank's slice and
        #                autograd here saw one of those uses. Returned short of complete, the LayerNorms and embeddings
        #                before the layer get a wrong gradient while the forward still looks right. The incoming buffer
        #                is left unmodified (autograd may share it).
        # HINT 1         The forward was the identity on a replicated X that N slices of the layer consumed. What is the
        #                gradient of a value used N times, and where do its pieces live?
        # HINT 2         one collective (sum) over ctx.group, on a contiguous copy of grad; return a pair.
        # HINT 3         grad = grad.contiguous().clone(); dist.all_reduce(grad, group=ctx.group); return grad, None
        grad = grad.contiguous().clone()  # autograd may hand the same buffer to other consumers
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
        # END SOLUTION


class _ReduceFromTP(torch.autograd.Function):
    """g, leaving the split region: rank r's term of the sum in, the layer's output out, on every rank."""

    @staticmethod
    def forward(ctx, x, group):
        # BEGIN SOLUTION Returns Z, the layer's output, the same full tensor on every rank of the group, where rank r's
        #                x is its term Y_r B_r of Z = sum over r of Y_r B_r; x itself is left unchanged (autograd may
        #                have saved it).
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
        # BEGIN SOLUTION Returns the gradient of the loss with respect to this rank's x, its term of the sum, and None
        #                for the group. What this rank's `grad` holds: dL/dZ for the Z every rank holds whole, identical
        #                on every rank, since everything after Z runs alike everywhere. The checker counts every
        #                collective: 2 per block in backward, in all.
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
    """This rank's `rows` of a Linear's output features (the A_r of the module's docstring).

    Input (..., in_features), the same on every rank; output (..., len(rows)): the full layer's output at the
    features `rows`, this rank's slice. `rows` is an index tensor: a contiguous block for the MLP, this rank's heads
    of q, k and v for attention.
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
        # BEGIN SOLUTION Returns the full layer's output at this rank's features, shape (..., rows kept), without any
        #                communication in forward (X is the same on every rank); in backward the gradient that reaches X
        #                (which the layers before use whole) must be the complete one, the same on every rank.
        # HINT 1         Which of the two conjugate ops stands at the entrance of the parallel region, and what does it
        #                do in forward and in backward?
        # HINT 2         copy_to_tp(x, self.group), then F.linear with this rank's weight and bias.
        # HINT 3         return F.linear of copy_to_tp(x, self.group) with self.weight and self.bias
        return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)
        # END SOLUTION


class RowParallelLinear(nn.Module):
    """This rank's `cols` of a Linear's input features (the B_r of the module's docstring).

    Input (..., len(cols)), this rank's slice (a column-parallel layer's output); output (..., out_features), the
    full layer's output, the same on every rank. The bias is whole on every rank: it belongs to the sum once, not to
    each rank's term.
    """

    def __init__(self, linear: nn.Linear, cols: torch.Tensor, group=None):
        super().__init__()
        self.group = group
        # BEGIN SOLUTION The module holds, as Parameters of its own, the weight's input columns named by `cols`, shape
        #                (out_features, columns kept), and the whole bias (out_features), both copies (no reference to
        #                the full layer survives): the bias counts once in the layer's output, so it is neither split
        #                nor divided.
        # HINT 1         The row-parallel matmul splits the sum over input features: which axis of the weight is that?
        #                Is the bias part of that sum, or added after it?
        # HINT 2         nn.Parameter of linear.weight[:, cols] (detach, clone); the bias whole (detach, clone).
        # HINT 3         self.weight = nn.Parameter(linear.weight.detach()[:, cols].clone()); self.bias =
        #                nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None
        self.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION Returns the full layer's output, shape (..., out_features), identical on every rank: the layer
        #                applied to the whole input, whose features are spread over the ranks, with the bias counted
        #                exactly once (the checker moves every bias off zero, so a bias counted N times shows); the
        #                gradient that reaches X_r is that of this rank's features only.
        # HINT 1         Which of the two conjugate ops stands at the exit of the parallel region? On which side of it
        #                does the bias go, and what goes wrong on the other side?
        # HINT 2         F.linear without the bias, reduce_from_tp over self.group, then + bias.
        # HINT 3         out = reduce_from_tp(F.linear(x, self.weight), self.group); return out + self.bias if self.bias
        #                is not None else out
        out = reduce_from_tp(F.linear(x, self.weight), self.group)
        return out + self.bias if self.bias is not None else out
        # END SOLUTION
