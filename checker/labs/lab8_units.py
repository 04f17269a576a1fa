"""Lab 8's unit run: the learner's make_mesh and check_layout called directly, on 2 ranks (loopback gloo),
at shapes where the right answer differs from its near misses.

Every node check runs 2 nodes x 2 ranks, where a mesh of shape (ranks per node, nodes) is the right one and a
mesh's dim names are never read (fully_shard reads a 2-D mesh by position). Here make_mesh is asked for 2 x 1
and 1 x 2, whose transposes differ. check_layout is run in the nodes run only on a right layout, so one that
never raises would pass there; here it is called under an environment that numbers the 2 ranks the wrong way
round (2 nodes of 1 rank: RANK 0 on node 1, RANK 1 on node 0), which every right check_layout refuses.
"""
from __future__ import annotations

import os

from checker import seams

LAB = "lab8"
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


TASKS = {"units": task_units}


def specs() -> list[dict]:
    """Beside the nodes run (the checks that read it read this one), once the learner's options have been read."""
    return [dict(name="units", task="units", nproc=2, budget_s=60, args={})]


# ---------------------------------------------------------------- checker side
def mesh_problem(r: dict) -> str | None:
    """What make_mesh got wrong at 2 x 1 and 1 x 2, in one line, or None."""
    for nodes, per_node in MESHES:
        got = r[f"mesh_{nodes}x{per_node}"]
        want = [[g * per_node + i for i in range(per_node)] for g in range(nodes)]
        call = f"make_mesh({nodes}, {per_node}, 'cpu') on 2 ranks"
        if "rows" not in got:
            return f"{call} raised {got.get('type')}: {got.get('message', '')[:200]}"
        if got["rows"] != want:
            return (f"{call} has rows {got['rows']}, expected {want}: a row is one node's ranks, so the shape is "
                    "(nodes, ranks per node)" + (" (this one is transposed)" if got["rows"] == [list(c) for c in
                                                                                           zip(*want)] else ""))
        if tuple(got["names"]) != NAMES:
            return (f"{call} names its dims {tuple(got['names'])}, expected {NAMES}: mesh['shard'] must be the "
                    "ranks of one node")
    return None


def layout_problem(r: dict) -> str | None:
    m = r["misnumbered"]
    if m["raised"]:
        return None
    return ("check_layout(2, 1) returned " + str(m["returned"])[:120] + " on 2 ranks whose environment puts RANK 0 "
            "on node 1 (GROUP_RANK 1) and RANK 1 on node 0: it must raise, the ranks are not numbered node by node "
            "(RANK = GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK)")
