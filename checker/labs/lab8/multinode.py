"""Lab 8's two-node job, worker side: the learner's torchrun options read with torchrun's own parser (task_plan),
and what each rank of the job measures (task_nodes), under the agents nodes.py starts.

The checker reads the inter-node bytes from the veth's own counters (/sys/class/net/<if>/statistics, the
numbers `ip -s link` prints), in node 0's namespace, around each strategy's steps; the learner's code
never sees them. Every rank's batch is a function of (seed, step, rank), so every strategy, every restart
and the uninterrupted run see the same data.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from checker import seams
from checker.labs import _crosscheck
from checker.labs._common import digest, tiny_model
from checker.labs.lab8 import LAB, LOSS_TOL, NODES, PER_NODE

BATCH, SEQ, LR = 4, 64, 1e-3


def _batch(step: int, rank: int, device):
    from labs.common.data import TokenFile, ensure_corpus

    tf = TokenFile.open(ensure_corpus(256))
    first = ((step * NODES * PER_NODE + rank) * BATCH) % (tf.num_windows(SEQ) - BATCH)
    return tf.batch(list(range(first, first + BATCH)), SEQ, device)


def _link_bytes(ifname: str | None) -> int | None:
    """Bytes both ways through this namespace's end of the veth (tx + rx: every byte that crossed)."""
    if not ifname:
        return None
    base = Path("/sys/class/net") / ifname / "statistics"
    return int((base / "tx_bytes").read_text()) + int((base / "rx_bytes").read_text())


def _train(model, opt, env, steps, first_step=1, on_step=None):
    """AdamW steps first_step..steps on the checker's data; returns the mean loss over ranks of each step."""
    import torch.distributed as dist

    losses = []
    for step in range(first_step, steps + 1):
        x, y = _batch(step, env.rank, env.device)
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / env.world_size)
        if on_step:
            on_step(step, losses[-1])
    return losses


# what a difference from the reference's own run of these steps most likely means, per strategy
WHY = {"ddp": "DDP's steps are torch's alone: does your code change a function torch's DDP or AdamW calls?",
       "fsdp": "Your shard_model on a flat mesh trains apart from the reference's: is every parameter sharded and "
               "its gradient reduced?",
       "hsdp": "Your HSDP trains apart from the reference's: does the mesh hold every rank once, one node per row?"}


def _strategy(ctx, seam, env, name, seed, steps, link_if):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = tiny_model(seed).to(env.device)
    if name == "ddp":
        model = DDP(model)
    elif name == "fsdp":
        model = seam.shard_model(model, init_device_mesh(env.device.type, (env.world_size,)))
    else:
        model = seam.shard_model(model, seam.make_mesh(NODES, PER_NODE, env.device.type))
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = _train(model, opt, env, 1)  # step 1: lazy initialisation's own collectives are not a step's traffic
    dist.barrier()
    b0 = _link_bytes(link_if)
    losses += _train(model, opt, env, steps, first_step=2)
    dist.barrier()
    b1 = _link_bytes(link_if)
    # the second opinion: the same steps in a run of the reference's, on loopback (plan.py); 2x the check's own
    # tolerance, as each side sits within LOSS_TOL of DDP's
    _crosscheck.keep(ctx, "hsdp_equivalence", name, losses, atol=2 * LOSS_TOL, why=WHY[name])
    n_params = sum(p.numel() for p in tiny_model(seed).parameters())
    return {"losses": [v.hex() for v in losses], "param_bytes": 4 * n_params,
            "link_bytes_per_step": None if b0 is None else (b1 - b0) / (steps - 1)}


def task_plan(ctx, target, endpoint, run_id, max_restarts, addrs):
    """The learner's torchrun options for each node (run here, in the checker's fork: nothing is started), read
    with torchrun's own parser: options that cannot make a 2-node job fail here, in a second, instead of two
    agents waiting out their rendezvous timeout (600 s). The same options for a 3 x 2 job are read too: at 2 x 2
    --nnodes and --nproc-per-node swapped make the same job, at 3 x 2 they do not."""
    seam = seams.load(LAB, target)
    plan = [list(map(str, seam.torchrun_args(NODES, PER_NODE, g, endpoint, run_id, max_restarts, addrs[g])))
            for g in range(NODES)]
    for g, argv in enumerate(plan):
        launch_problem(argv, g, endpoint, max_restarts)
    for g in range(WIDE[0]):
        argv = list(map(str, seam.torchrun_args(*WIDE, g, endpoint, run_id, max_restarts, addrs[min(g, 1)])))
        launch_problem(argv, g, endpoint, max_restarts, shape=WIDE)
    return {"torchrun": plan}


LOOPBACK = ("localhost", "127.", "::1", "0.0.0.0")
WIDE = (3, 2)  # (nodes, ranks per node) of the second job whose options are read: no two of its sizes are equal
NOTICE_S = 3  # the contract: a silent node is declared dead within 3 s (keep_alive_interval x keep_alive_max_attempt)


def launch_problem(argv: list[str], node: int, endpoint: str, max_restarts: int,
                   shape: tuple[int, int] = (NODES, PER_NODE)) -> None:
    """Raise ValueError, in one line, for torchrun options that cannot start this lab's job of `shape`
    (nodes, ranks per node) as its contract asks."""
    import socket

    from torch.distributed.run import get_args_parser

    nodes, per_node = shape
    where = f"torchrun_args({nodes}, {per_node}, node_rank={node}, ...)"
    try:
        a = get_args_parser().parse_args([*argv, "worker.py"])
    except SystemExit:
        raise ValueError(f"{where}: torchrun does not accept {argv}") from None
    lo, _, hi = str(a.nnodes).partition(":")
    swapped = " (nodes and ranks per node swapped?)" if (int(hi or lo), str(a.nproc_per_node)) == (
        per_node, str(nodes)) else ""
    if int(hi or lo) != nodes:
        raise ValueError(f"{where}: --nnodes is {a.nnodes}" + (" (torchrun's default when it is missing)" if
                         str(a.nnodes) == "1:1" else swapped) + f": each agent would wait for, or start, a job of "
                         f"{hi or lo} node(s), not {nodes}")
    if str(a.nproc_per_node) != str(per_node):
        raise ValueError(f"{where}: --nproc-per-node is {a.nproc_per_node}, not {per_node}{swapped}")
    if a.rdzv_backend != "c10d":
        raise ValueError(f"{where}: the rendezvous backend is {a.rdzv_backend!r}" + (
            " (torchrun's default when --rdzv-backend is missing)" if a.rdzv_backend == "static" else "")
            + ": the nodes meet through a c10d rendezvous hosted at the endpoint")
    host = a.rdzv_endpoint.rpartition(":")[0].strip("[]") if ":" in a.rdzv_endpoint else a.rdzv_endpoint
    if not host:
        raise ValueError(f"{where}: no --rdzv-endpoint: each node's agent would look for the rendezvous on its own "
                         f"localhost and wait for the other node until the join timeout; node 0 hosts it at {endpoint}")
    if host.startswith(LOOPBACK) and not endpoint.startswith(LOOPBACK):
        raise ValueError(f"{where}: --rdzv-endpoint {a.rdzv_endpoint} is a loopback address: every node would "
                         f"meet itself; the other node reaches node 0 at {endpoint}")
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        raise ValueError(f"{where}: --rdzv-endpoint {a.rdzv_endpoint}: {host!r} does not resolve") from None
    conf = {k.strip(): v.strip() for k, _, v in (kv.partition("=") for kv in a.rdzv_conf.split(",") if kv)}
    try:  # torchrun's defaults: a keep-alive every 5 s, 3 missed make a node dead
        notice = int(conf.get("keep_alive_interval", 5)) * int(conf.get("keep_alive_max_attempt", 3))
    except ValueError:
        raise ValueError(f"{where}: --rdzv-conf={a.rdzv_conf}: keep_alive_interval and keep_alive_max_attempt "
                         "are whole numbers") from None
    if notice > NOTICE_S:
        raise ValueError(f"{where}: --rdzv-conf={a.rdzv_conf} declares a silent node dead after {notice} s "
                         f"(keep_alive_interval x keep_alive_max_attempt; torchrun's defaults 5 x 3), not within "
                         f"{NOTICE_S} s: a lost node would hold the job that long")
    if node and conf.get("is_host", "").lower() in ("1", "true", "t", "yes", "y"):
        raise ValueError(f"{where}: --rdzv-conf={a.rdzv_conf} says is_host on node {node}: its agent would also "
                         "start a rendezvous store, binding the endpoint's port on that node (and failing the job "
                         "where the port is taken there); only node 0 hosts it")
    if a.max_restarts < max_restarts:
        raise ValueError(f"{where}: --max-restarts is {a.max_restarts}: a lost node would end the job instead of "
                         f"restarting the workers (this run asks for {max_restarts})")


def task_nodes(ctx, target, parts, seed, steps, link_ifs, ckpt=None, kill_after=None, save_every=3):
    """Every rank of the two-node job: the learner's interface choice and layout check, then each part."""
    import torch.distributed as dist

    from labs.common import dist as cdist

    seam = seams.load(LAB, target)
    out = ctx.partial
    group = int(os.environ.get("GROUP_RANK", -1))
    out["chosen_if"], out["chosen_if_error"] = ctx.attempt(lambda: seam.pick_interface(os.environ["MASTER_ADDR"]))
    out.update(group_rank=group, local_rank=int(os.environ.get("LOCAL_RANK", -1)), rank=int(os.environ["RANK"]),
               netns=os.stat("/proc/self/ns/net").st_ino, restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
               expected_if=link_ifs[group] if 0 <= group < len(link_ifs) else None)
    os.environ["GLOO_SOCKET_IFNAME"] = out["chosen_if"] or link_ifs[group]
    env = cdist.init(timeout_s=120)  # a restarted rank imports torch again before it listens: slow on a busy node
    out["layout"], out["layout_error"] = ctx.attempt(lambda: seam.check_layout(NODES, PER_NODE))
    every: list = [None] * env.world_size
    dist.all_gather_object(every, {k: out[k] for k in ("rank", "group_rank", "local_rank", "netns")})
    out["every"] = every
    link_if = link_ifs[0] if group == 0 and out["local_rank"] == 0 else None  # one reader: node 0's end
    if "equiv" in parts:
        for name in ("ddp", "fsdp", "hsdp"):
            out[name], out[f"{name}_error"] = ctx.attempt(lambda name=name: _strategy(ctx, seam, env, name, seed,
                                                                                       steps, link_if))
            if out[f"{name}_error"]:
                return out  # a peer may be inside a collective: stop here
    if "elastic" in parts:
        out["elastic"], out["elastic_error"] = ctx.attempt(lambda: _elastic(ctx, seam, env, seed, steps, ckpt,
                                                                            kill_after, save_every))
        if out["elastic_error"]:
            return out
    cdist.teardown()
    return out


def _elastic(ctx, seam, env, seed, steps, ckpt, kill_after, save_every):
    """HSDP training with a checkpoint every `save_every` steps. Attempt 0 (no restart yet) reports its losses and
    cues the kill after step `kill_after`, then waits in collectives until the lost node takes it down."""
    import torch
    import torch.distributed as dist

    model = seam.shard_model(tiny_model(seed).to(env.device), seam.make_mesh(NODES, PER_NODE, env.device.type))
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    first = seam.resume(ckpt, model, opt) + 1
    first_attempt = not (Path(ckpt) / "attempt0.json").exists()
    seen: dict = {"resumed_from": first - 1, "first_step_at": None}
    losses: list[float] = []

    def on_step(step, loss):
        if seen["first_step_at"] is None:
            seen["first_step_at"] = time.time()
        losses.append(loss)
        if step % save_every == 0:
            seam.save_checkpoint(ckpt, model, opt, step)
        if first_attempt and step == kill_after:
            if env.rank == 0:
                (Path(ckpt) / "attempt0.json").write_text(json.dumps([v.hex() for v in losses]))
            dist.barrier()
            ctx.cue("lose_node1")
            try:
                while True:  # in a collective when the node goes: the survivors see the loss as an error
                    dist.all_reduce(torch.zeros(1))
                    time.sleep(0.05)
            except Exception:
                # ...and crash, as a training script does. Caught and returned, the survivors would exit 0: their
                # agent would call the job done, and the restarted node would wait alone at the rendezvous.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(3)

    _train(model, opt, env, steps, first_step=first, on_step=on_step)
    before = json.loads((Path(ckpt) / "attempt0.json").read_text())
    return {**seen, "losses": [v.hex() for v in losses], "attempt0": before, "digest": digest(
        (n, p.to_local() if hasattr(p, "to_local") else p) for n, p in model.named_parameters())}
