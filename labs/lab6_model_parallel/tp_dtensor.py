# GENERATED from solutions/lab6_model_parallel/tp_dtensor.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""The same tensor parallelism with DTensor: a plan of ColwiseParallel / RowwiseParallel on a DeviceMesh.

    torchrun --nproc_per_node 2 -m labs.lab6_model_parallel.tp_report --out runs/lab6/tp.json

What parallelize_module does with the plan (torch.distributed.tensor.parallel):
    ColwiseParallel   weight and bias become DTensors sharded on dim 0 (Shard(0)): rank r holds rows
                      r*out/N ...; the input is marked Replicate, whose backward all-reduces (your f)
    RowwiseParallel   weight Shard(1), bias Replicate; the output's partial sums are all-reduced (your g)
With use_local_output (the default) the layers return plain local tensors, so TPAttention from
tensor_parallel.py runs unchanged on them.

One catch: ColwiseParallel shards qkv's 3d output rows *contiguously*, so with N=2 rank 0 would get
all of q and half of k. Permute the rows first, so that contiguous block r is exactly
[q of r's heads | k of r's heads | v of r's heads], the layout `parallelize` built by indexing. Then
both versions hold the same numbers on the same rank (the checker compares them to the same slices).

Sequence parallelism (optional): LayerNorm and dropout run on replicated activations, so each rank
holds B*T*d of them; SequenceParallel() on ln1/ln2 shards them along T, and the layers' all-reduces
become a reduce-scatter + all-gather pair (same bytes, 1/N of the activations).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .tensor_parallel import TPAttention, qkv_rows


def interleave_qkv(qkv: nn.Linear, n_head: int, world: int) -> None:
    """Permute qkv's output rows in place so that contiguous block r holds rank r's heads of q, k and v."""
    d = qkv.in_features
    raise NotImplementedError("TODO(lab6): Afterwards qkv's output rows (weight rows and bias entries alike) are "
                              "permuted in place so that contiguous block r of 3d/N rows holds exactly rank r's heads "
                              "of q, then of k, then of v: what a contiguous split hands rank r equals what the "
                              "hand-written split indexes. The permutation is not recorded by autograd. (hints: "
                              "checker hint lab6 tp_dtensor.interleave_qkv)")


def parallelize_dtensor(model: nn.Module, mesh) -> nn.Module:
    """Tensor-parallel blocks on a 1-D DeviceMesh `mesh` with parallelize_module; in place. Names as the model's."""
    # imported here, not at the top: DTensor's op tables cost ~1.5 s per rank, and only this function needs them
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    cfg, world = model.cfg, mesh.size()
    hd = cfg.n_embd // cfg.n_head
    raise NotImplementedError("TODO(lab6): In place, returns the model: in every block qkv and the MLP's fc are split "
                              "by output rows, the attention's and the MLP's proj by input columns with the bias "
                              "whole, over the 1-D mesh; qkv's rows are permuted first and attention runs over the "
                              "local heads, so each rank holds the same numbers as the hand-written split, and the "
                              "layers return plain local tensors. (hints: checker hint lab6 "
                              "tp_dtensor.parallelize_dtensor)")
