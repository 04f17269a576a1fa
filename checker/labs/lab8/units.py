"""Lab 8's unit run: the learner's make_mesh and check_layout called directly, on 2 ranks (loopback gloo),
at shapes where the right answer differs from its near misses.

Every node check runs 2 nodes x 2 ranks, where a mesh of shape (ranks per node, nodes) is the right one and a
mesh's dim names are never read (fully_shard reads a 2-D mesh by position). Here make_mesh is asked for 2 x 1
and 1 x 2, whose transposes differ. check_layout is run in the nodes run only on a right layout, so one that
never raises would pass there; here it is called under an environment that numbers the 2 ranks the wrong way
round (2 nodes of 1 rank: RANK 0 on node 1, RANK 1 on node 0), which every right check_layout refuses.
What the unit run found wrong is read on the parent side (checks.py: mesh_problem, layout_problem).
"""
from __future__ import annotations

import os

from checker import seams
from checker.labs.lab8 import LAB

MESHES = ((2, 1), (1, 2))  # (nodes, ranks per node) on 2 ranks: each the other's transpose
NAMES = ("replicate", "shard")


def _forged_env(rank: int) -> dict[str, str]:
    """torchrun's variables for 2 nodes of 1 rank, numbered against the nodes: node g holds rank 1 - g."""
    return {"RANK": str(rank), "WORLD_SIZE": "2", "GROUP_RANK": str(1 - rank), "GROUP_WORLD_SIZE": "2",
            "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": "2"}


def task_units(ctx, target):
    import torch.distributed as dist

    from labs.common import dist as cdist

    seam = seams.load(LAB, target)
    env = cdist.init(timeout_s=20)
    out = ctx.partial
    for nodes, per_node in MESHES:
        mesh, err = ctx.attempt(lambda n=nodes, p=per_node: seam.make_mesh(n, p, "cpu"))
        out[f"mesh_{nodes}x{per_node}"] = err or {"rows": mesh.mesh.tolist(), "names": list(mesh.mesh_dim_names
                                                                                             or ())}
        dist.barrier()
    saved = {k: os.environ.get(k) for k in _forged_env(env.rank)}
    os.environ.update(_forged_env(env.rank))
    try:
        got, err = ctx.attempt(lambda: seam.check_layout(2, 1))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out["misnumbered"] = {"raised": err is not None, "returned": got}
    cdist.teardown()
    return out

