# GENERATED from solutions/lab6_model_parallel/tp_dtensor.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""The same tensor parallelism with DTensor: a plan of parallel styles applied to each block on a DeviceMesh.

    torchrun --nproc_per_node 2 -m labs.lab6_model_parallel.tp_report --out runs/lab6/tp.json

torch.distributed.tensor.parallel offers parallel styles, each a way to split one module: which dimension of
its weight and bias becomes a shard (a DTensor placement), and what its input and output are marked as
(replicated, sharded, or partial sums), which is where the communication comes from. parallelize_module
applies a plan of them keyed by submodule path. Which style is your ColumnParallelLinear and which your
RowParallelLinear, and where each puts your f and your g, is for you to read off its documentation. With
plain local tensors coming out of the split layers (use_local_output, the default), the code between them
sees ordinary tensors of the local width.

One catch: a shard along a dimension is always a contiguous block of it, so rank r gets rows
[r*3d/N, (r+1)*3d/N) of qkv's output. Are those whole heads? (With N = 2, what would rank 0 hold?) What must
hold instead is interleave_qkv's contract. Then both versions hold the same numbers on the same rank (the
checker compares both with the same slices of the unsplit tensors).

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
    raise NotImplementedError("TODO(lab6): Afterwards, for every rank r, the contiguous block r of qkv's 3d/N output "
                              "rows (weight rows and bias entries alike) holds exactly what the hand-written split's "
                              "qkv keeps on rank r, in the same order: so what a contiguous split hands rank r equals "
                              "what parallelize indexes out for it. The layer computes the same outputs as before, in "
                              "another order; in place, not recorded by autograd. (hints: checker hint lab6 "
                              "tp_dtensor.interleave_qkv)")


def parallelize_dtensor(model: nn.Module, mesh) -> nn.Module:
    """Tensor-parallel blocks on a 1-D DeviceMesh `mesh` with parallelize_module; in place. Names as the model's."""
    cfg, world = model.cfg, mesh.size()
    hd = cfg.n_embd // cfg.n_head
    raise NotImplementedError("TODO(lab6): In place, returns the model: every block split over the 1-D mesh so that "
                              "each rank holds, as the local shards of DTensor parameters under the model's names, "
                              "exactly the numbers your parallelize holds on it; logits, loss and every gradient equal "
                              "the unsplit model's (within 1e-5), and the split layers hand plain local tensors to the "
                              "code around them. (hints: checker hint lab6 tp_dtensor.parallelize_dtensor)")
