"""The multi-node launch: what each node's torchrun is told, which interface gloo uses, and a readiness check.

    # on node 0 (its address 10.0.0.1) and on node 1, the same command but --node-rank 1:
    torchrun --nnodes 2 --nproc-per-node 2 --node-rank 0 --rdzv-backend c10d \\
        --rdzv-endpoint 10.0.0.1:29400 --rdzv-id job1 --max-restarts 1 -m solutions.lab8_multinode.train
    python -m solutions.lab8_multinode.nodes      # both nodes here: two network namespaces (root) or loopback

torchrun numbers ranks node by node: node g's local rank l is global rank g * nproc_per_node + l. So with
2 nodes x 2 ranks, ranks {0, 1} share node 0 and {2, 3} node 1; a mesh of shape (nodes, ranks per node)
therefore has one node per row.
"""
from __future__ import annotations

import os
import socket
import subprocess

import torch.distributed as dist


def torchrun_args(nnodes: int, nproc_per_node: int, node_rank: int, endpoint: str, run_id: str,
                  max_restarts: int, local_addr: str) -> list[str]:
    """torchrun's options for node `node_rank` (reached by the others at `local_addr`) of a job whose
    rendezvous is at `endpoint` ("host:port").

    --local-addr is the address this node's agent advertises: node 0's becomes every worker's MASTER_ADDR.
    Left out, the agent advertises its hostname, which resolves to an address the other node cannot reach
    (here, inside a network namespace: localhost; on clusters often a management network).

    c10d rendezvous: node 0's agent hosts a TCPStore at the endpoint and every agent joins it; no
    MASTER_PORT to agree on. A node that dies stops sending keep-alives; the others notice after
    keep_alive_interval x keep_alive_max_attempt seconds (5 x 3 = 15 s by default, 1 x 3 here) and the
    rendezvous opens a new round the restarted node can join."""
    # BEGIN SOLUTION --nnodes, --nproc-per-node, --node-rank, --rdzv-backend c10d, --rdzv-endpoint, --rdzv-id,
    #                --local-addr, --max-restarts, and --rdzv-conf keep_alive_interval=1,keep_alive_max_attempt=3
    #                (is_host=1 on node 0)
    conf = "keep_alive_interval=1,keep_alive_max_attempt=3" + (",is_host=1" if node_rank == 0 else ",is_host=0")
    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}", f"--node-rank={node_rank}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
            f"--rdzv-conf={conf}", f"--local-addr={local_addr}", f"--max-restarts={max_restarts}"]
    # END SOLUTION


def pick_interface(master_addr: str) -> str:
    """The network interface this node reaches `master_addr` through (set it as GLOO_SOCKET_IFNAME, and
    NCCL_SOCKET_IFNAME on GPUs). Without it gloo binds to the address the hostname resolves to, which on a
    cluster is often the management network or, in a container, no interface at all."""
    # BEGIN SOLUTION the interface holding master_addr if it is this node's (`ip -o addr show to ADDR`, 2nd word); else
    #                the routing table's choice (`ip -o route get ADDR`, the word after "dev")
    def ip(*argv: str) -> list[str]:
        return subprocess.run(["ip", "-o", *argv], capture_output=True, text=True, check=True,
                              timeout=10).stdout.split()

    held = ip("addr", "show", "to", master_addr)  # node 0: its own address routes via lo, but gloo
    if held:                                      # must bind where node 1 can reach it
        return held[1]
    words = ip("route", "get", master_addr)
    return words[words.index("dev") + 1]
    # END SOLUTION


def check_layout(expected_nodes: int, expected_per_node: int) -> dict:
    """Every rank, after init_process_group: gather every rank's (RANK, GROUP_RANK, LOCAL_RANK,
    LOCAL_WORLD_SIZE, host) and raise if the job is not `expected_nodes` x `expected_per_node`, laid out
    node by node. Returns {"world", "nodes": [[ranks of node 0], ...], "ifname"}. A job that starts with a
    wrong layout still trains, but its HSDP mesh puts a shard group across the slow link."""
    # BEGIN SOLUTION all_gather_object each rank's ids (node identity: hostname + the network namespace,
    #                /proc/self/ns/net); check WORLD_SIZE, node count, ranks per node and rank == group_rank *
    #                local_world + local_rank
    me = {"rank": int(os.environ["RANK"]), "group_rank": int(os.environ["GROUP_RANK"]),
          "local_rank": int(os.environ["LOCAL_RANK"]), "local_world": int(os.environ["LOCAL_WORLD_SIZE"]),
          "host": f"{socket.gethostname()}:{os.stat('/proc/self/ns/net').st_ino}"}
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, me)
    world = expected_nodes * expected_per_node
    if len(every) != world:
        raise RuntimeError(f"world size {len(every)}, expected {expected_nodes} nodes x {expected_per_node}")
    nodes: dict[int, list[int]] = {}
    for r in every:
        if r["rank"] != r["group_rank"] * r["local_world"] + r["local_rank"]:
            raise RuntimeError(f"rank {r['rank']} is local rank {r['local_rank']} of node {r['group_rank']}: "
                               "ranks are not numbered node by node")
        nodes.setdefault(r["group_rank"], []).append(r["rank"])
    hosts = {g: {r["host"] for r in every if r["group_rank"] == g} for g in nodes}
    if len(nodes) != expected_nodes or any(len(v) != expected_per_node for v in nodes.values()):
        raise RuntimeError(f"nodes {nodes}, expected {expected_nodes} of {expected_per_node} ranks")
    if any(len(h) != 1 for h in hosts.values()):
        raise RuntimeError(f"a node's ranks run on different hosts: {hosts}")
    return {"world": len(every), "nodes": [sorted(nodes[g]) for g in sorted(nodes)],
            "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}
    # END SOLUTION


def source_addr(addr: str) -> str:
    """This node's address on its way to `addr`: what the routing table would send from (`ip -o route get`,
    the word after "src"). On a cluster it is the node's address on the network the job's traffic uses."""
    words = subprocess.run(["ip", "-o", "route", "get", addr], capture_output=True,
                           text=True, check=True, timeout=10).stdout.split()
    return words[words.index("src") + 1]


def main(argv=None) -> None:
    """This node's torchrun options on one line, for a batch script (train.sbatch):

        torchrun $(python -c "import sys; from solutions.lab8_multinode.launch import main; main(sys.argv[1:])" \\
            --nnodes 2 --nproc-per-node 2 --node-rank $SLURM_NODEID --endpoint node0:29400 --run-id $SLURM_JOB_ID) ...
    """
    import argparse

    ap = argparse.ArgumentParser(description="print this node's torchrun options (torchrun_args)")
    ap.add_argument("--nnodes", type=int, required=True)
    ap.add_argument("--nproc-per-node", type=int, required=True)
    ap.add_argument("--node-rank", type=int, required=True)
    ap.add_argument("--endpoint", required=True, help="node 0's host:port, where the rendezvous runs")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--max-restarts", type=int, default=3)
    args = ap.parse_args(argv)
    host, port = args.endpoint.rsplit(":", 1)
    addr = socket.gethostbyname(host)  # an address: every node must reach the same one
    if args.nnodes > 1 and addr.startswith("127."):
        raise SystemExit(f"launch: {host} is {addr} on this node, which no other node can reach (/etc/hosts maps "
                         "this machine's own name to loopback): give node 0's network address in --endpoint")
    endpoint = f"{addr}:{port}"
    print(" ".join(torchrun_args(args.nnodes, args.nproc_per_node, args.node_rank, endpoint, args.run_id,
                                 args.max_restarts, source_addr(addr))))
