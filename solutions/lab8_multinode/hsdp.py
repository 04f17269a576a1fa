"""HSDP: FSDP2 on a 2-D mesh, replicate across nodes, shard within a node; and flat FSDP for comparison.

Bytes across the inter-node link per step, model of B bytes (fp32: 4 bytes x params), g nodes of n ranks,
N = g n, the whole model one sharded unit that keeps its gathered weights from forward to backward (one
all-gather, one gradient reduce-scatter per step).
gloo's collectives are rings in rank order (0 -> 1 -> 2 -> 3 -> 0), and ranks are numbered node by node, so
a ring over all N ranks crosses the link g times; each hop carries (N-1)/N B per all-gather, and gloo runs a
reduce-scatter as a whole all-reduce (2 (N-1)/N B per hop) of which each rank keeps its slice (measured
on the veth: all-gather 1.51 B, reduce-scatter 3.02 B, all-reduce 3.02 B at 2 x 2; NCCL's is a true
reduce-scatter, (N-1)/N B per hop):
  flat FSDP (N ranks)  g hops x (N-1)/N B x (1 + 2) = 3 g (N-1)/N B              2 x 2: 4.5 B per step
  HSDP (g x n mesh)    all-gather and reduce-scatter stay inside a node; each of the n replicate groups
                       (one rank per node) all-reduces its B/n gradient shard: every rank sends
                       2 (g-1)/g B/n, all of it to another node: n g 2 (g-1)/g B/n = 2 (g-1) B   2 x 2: 2 B
  DDP                  one all-reduce over N ranks: g hops x 2 (N-1)/N B          2 x 2: 3 B
With the tiny GPT (B = 0.48 MB) that is 2.2 MB (FSDP) vs 0.96 MB (HSDP) per step, both directions
together. HSDP's cross-node bytes do not grow with node size n, and its all-gathers (before each forward,
on the critical path) never leave the node.
"""
from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh


def make_mesh(nnodes: int, nproc_per_node: int, device_type: str) -> DeviceMesh:
    """The 2-D mesh HSDP shards on: dim 0 "replicate" across nodes, dim 1 "shard" within a node. A row of
    the mesh must be one node's ranks (torchrun numbers ranks node by node, so rank = node * per_node + local)."""
    # BEGIN SOLUTION A 2-D mesh over the default group's ranks (every rank, of device_type) of shape (nodes, ranks
    #                per node) whose row g holds node g's ranks, g*n to g*n + n - 1 (torchrun numbers ranks node by
    #                node). Its dims are named, and the names are part of the contract (the checker reads them): dim
    #                0 "replicate" (across nodes), dim 1 "shard" (within a node). Then all-gathers and reduce-scatters
    #                stay inside a node and only a B/n gradient shard per rank is all-reduced across the link:
    #                2 (g-1) B per step, not 3 g (N-1)/N B.
    # HINT 1         HSDP shards where the link is fast and replicates where it is slow. Ask: which ranks share a
    #                node, so which mesh dimension's groups must be one node's ranks? What would a transposed mesh
    #                send across the slow link, and how often?
    # HINT 2         torch's device-mesh initialiser (torch.distributed.device_mesh.init_device_mesh): the device type,
    #                a shape tuple, the dimension names; ranks fill the mesh row by row.
    # HINT 3         return init_device_mesh(device_type, (nnodes, nproc_per_node),
    #                mesh_dim_names=("replicate", "shard")).
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (nnodes, nproc_per_node), mesh_dim_names=("replicate", "shard"))
    # END SOLUTION


def shard_model(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """In place: the whole model becomes one sharded unit on `mesh` (1-D: FSDP; 2-D: HSDP) that keeps its
    gathered parameters from forward to backward: one all-gather and one gradient reduction per step, so the
    bytes per step are the formula's. Returns the model."""
    # BEGIN SOLUTION In place, the whole model becomes one sharded unit on mesh (1-D: FSDP over all N ranks; 2-D:
    #                HSDP, replicated over dim 0, sharded over dim 1) that keeps its gathered parameters from forward
    #                to backward: one all-gather and one gradient reduction per step, so the link carries the
    #                formula's bytes (FSDP 3 g (N-1)/N B, HSDP 2 (g-1) B). Returns the model.
    # HINT 1         By default FSDP frees the gathered weights after forward and gathers them again for backward.
    #                Ask: how many all-gathers per step does the byte formula assume, and which setting gives
    #                exactly that? What does a 2-D mesh tell the sharding about which ranks replicate?
    # HINT 2         FSDP2's fully_shard (torch.distributed.fsdp), applied once to the root module, with the mesh and
    #                reshard_after_forward.
    # HINT 3         fully_shard(model, mesh=mesh, reshard_after_forward=False); return model.
    from torch.distributed.fsdp import fully_shard

    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model
    # END SOLUTION
