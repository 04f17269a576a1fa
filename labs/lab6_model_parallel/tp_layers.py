# GENERATED from solutions/lab6_model_parallel/tp_layers.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
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
        raise NotImplementedError("TODO(lab6): Returns dL/dX and None for the group, where dL/dX is the complete "
                                  "gradient of the loss with respect to f's input X, the same tensor on every rank of "
                                  "the group. What this rank's `grad` holds: the gradient through its own slice of the "
                                  "layer only, since X fed every rank's slice and autograd here saw one of those uses. "
                                  "Returned short of complete, the LayerNorms and embeddings before the layer get a "
                                  "wrong gradient while the forward still looks right. The incoming buffer is left "
                                  "unmodified (autograd may share it). (hints: checker hint lab6 "
                                  "tp_layers.CopyToTP.backward)")


class _ReduceFromTP(torch.autograd.Function):
    """g, leaving the split region: rank r's term of the sum in, the layer's output out, on every rank."""

    @staticmethod
    def forward(ctx, x, group):
        raise NotImplementedError("TODO(lab6): Returns Z, the layer's output, the same full tensor on every rank of "
                                  "the group, where rank r's x is its term Y_r B_r of Z = sum over r of Y_r B_r; x "
                                  "itself is left unchanged (autograd may have saved it). (hints: checker hint lab6 "
                                  "tp_layers.ReduceFromTP.forward)")

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("TODO(lab6): Returns the gradient of the loss with respect to this rank's x, its "
                                  "term of the sum, and None for the group. What this rank's `grad` holds: dL/dZ for "
                                  "the Z every rank holds whole, identical on every rank, since everything after Z "
                                  "runs alike everywhere. The checker counts every collective: 2 per block in "
                                  "backward, in all. (hints: checker hint lab6 tp_layers.ReduceFromTP.backward)")


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
        raise NotImplementedError("TODO(lab6): The module holds only this rank's slice, as Parameters of its own: the "
                                  "weight rows named by `rows` (the output features it computes), shape (that many, "
                                  "in_features), and the same entries of the bias (None without one); copies, so that "
                                  "no reference to the full layer survives and a rank holds 1/N of its bytes. (hints: "
                                  "checker hint lab6 tp_layers.ColumnParallelLinear)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("TODO(lab6): Returns the full layer's output at this rank's features, shape (..., "
                                  "rows kept), without any communication in forward (X is the same on every rank); in "
                                  "backward the gradient that reaches X (which the layers before use whole) must be "
                                  "the complete one, the same on every rank. (hints: checker hint lab6 "
                                  "tp_layers.ColumnParallelLinear.forward)")


class RowParallelLinear(nn.Module):
    """This rank's `cols` of a Linear's input features (the B_r of the module's docstring).

    Input (..., len(cols)), this rank's slice (a column-parallel layer's output); output (..., out_features), the
    full layer's output, the same on every rank. The bias is whole on every rank: it belongs to the sum once, not to
    each rank's term.
    """

    def __init__(self, linear: nn.Linear, cols: torch.Tensor, group=None):
        super().__init__()
        self.group = group
        raise NotImplementedError("TODO(lab6): The module holds, as Parameters of its own, the weight's input columns "
                                  "named by `cols`, shape (out_features, columns kept), and the whole bias "
                                  "(out_features), both copies (no reference to the full layer survives): the bias "
                                  "counts once in the layer's output, so it is neither split nor divided. (hints: "
                                  "checker hint lab6 tp_layers.RowParallelLinear)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("TODO(lab6): Returns the full layer's output, shape (..., out_features), identical "
                                  "on every rank: the layer applied to the whole input, whose features are spread over "
                                  "the ranks, with the bias counted exactly once (the checker moves every bias off "
                                  "zero, so a bias counted N times shows); the gradient that reaches X_r is that of "
                                  "this rank's features only. (hints: checker hint lab6 "
                                  "tp_layers.RowParallelLinear.forward)")
