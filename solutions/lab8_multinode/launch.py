"""The multi-node launch: what each node's torchrun is told, which interface gloo uses, and a readiness check.

    # on each node: torchrun with that node's options (torchrun_args; main prints them, see its docstring)
    torchrun <this node's torchrun_args> -m solutions.lab8_multinode.train
    python -m solutions.lab8_multinode.nodes      # both nodes here: two network namespaces (root) or loopback

torchrun numbers ranks node by node: node g's local rank l is global rank g * nproc_per_node + l, where g is
the worker's GROUP_RANK, which the c10d rendezvous assigns once every agent has joined (it ignores --node-rank;
only the static rendezvous reads it). So with 2 nodes x 2 ranks, ranks {0, 1} share node 0 and {2, 3} node 1;
a mesh of shape (nodes, ranks per node) therefore has one node per row.
"""
from __future__ import annotations

import os
import socket

import torch.distributed as dist


def torchrun_args(nnodes: int, nproc_per_node: int, node_rank: int, endpoint: str, run_id: str,
                  max_restarts: int, local_addr: str) -> list[str]:
    """torchrun's options, as "--option=value" strings, for node `node_rank` (reached by the others at
    `local_addr`) of an nnodes x nproc_per_node job `run_id` whose rendezvous is at `endpoint` ("host:port").

    What they must make true: every node's agent meets the others at the endpoint (node 0's agent hosts the
    meeting point), every worker learns a MASTER_ADDR the other nodes can reach, failed workers restart up to
    max_restarts times, and a node that dies is noticed within 3 s (torchrun's default is 15 s), after which
    the rendezvous opens a new round the restarted node can join."""
    # BEGIN SOLUTION A list of "--option=value" strings with which each node's torchrun agent joins the others in a
    #                c10d rendezvous at endpoint (node 0's agent hosts its store) for job run_id, starts
    #                nproc_per_node workers of an nnodes-node job, advertises local_addr (the address the other
    #                nodes reach it at), restarts workers up to max_restarts times, and declares a silent node dead
    #                within 3 s (torchrun's default: 15 s). Only node 0's agent hosts the store: another that did
    #                would bind the endpoint's port on its own machine.
    # HINT 1         Every node runs the same launcher; only what differs per node may differ. Ask: how do the agents
    #                find each other, who hosts the meeting point, what address does each advertise (a hostname
    #                may resolve to one the other node cannot reach), and how soon is a silent node declared dead?
    # HINT 2         torchrun's rendezvous options (backend, endpoint, id, and --rdzv-conf's keep-alive settings and
    #                is_host), its sizes, --local-addr and --max-restarts. Only the static rendezvous reads
    #                --node-rank: under c10d, node_rank matters only through is_host (who hosts the store).
    # HINT 3         --nnodes, --nproc-per-node, --node-rank, --rdzv-backend=c10d, --rdzv-endpoint, --rdzv-id,
    #                --local-addr, --max-restarts, and --rdzv-conf=keep_alive_interval=1,keep_alive_max_attempt=3
    #                plus is_host=1 on node 0 (is_host=0 elsewhere).
    # --local-addr is the address this node's agent advertises: node 0's becomes every worker's MASTER_ADDR. Left
    # out, the agent advertises its hostname, which resolves to an address the other node cannot reach (here,
    # inside a network namespace: localhost; on clusters often a management network). c10d rendezvous: node 0's
    # agent hosts a TCPStore at the endpoint and every agent joins it; no MASTER_PORT to agree on. A dead node
    # stops sending keep-alives; the others notice after keep_alive_interval x keep_alive_max_attempt seconds.
    conf = "keep_alive_interval=1,keep_alive_max_attempt=3" + (",is_host=1" if node_rank == 0 else ",is_host=0")
    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}", f"--node-rank={node_rank}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
            f"--rdzv-conf={conf}", f"--local-addr={local_addr}", f"--max-restarts={max_restarts}"]
    # END SOLUTION


def pick_interface(master_addr: str) -> str:
    """The network interface this node reaches `master_addr` through (set it as GLOO_SOCKET_IFNAME, and
    NCCL_SOCKET_IFNAME on GPUs). Without it gloo binds to the address the hostname resolves to, which on a
    cluster is often the management network or, in a container, no interface at all."""
    # BEGIN SOLUTION The name of the interface that links this node to master_addr's node: where gloo must listen so
    #                that the other nodes' connections reach this one. Every node answers its end of that link, node
    #                0 included, though master_addr is its own address (the other node cannot reach loopback). Here:
    #                each namespace's veth end; in the loopback emulation, lo. Not where the hostname resolves (a
    #                management network, or in a container nothing routable).
    # HINT 1         Which interface carries traffic to an address is the kernel's routing decision, except for an
    #                address the node holds itself. Ask: on node 0, where does its own address route, and can the
    #                other node reach that interface?
    # HINT 2         The `ip` tool in one-line mode (-o), run as a subprocess: which interface holds the address, and
    #                the route to it; split its output into words.
    # HINT 3         The interface holding master_addr if this node has it (`ip -o addr show to ADDR`, the 2nd word);
    #                else the routing table's choice (`ip -o route get ADDR`, the word after "dev").
    import subprocess

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
    """Every rank, after init_process_group: raise unless the job is `expected_nodes` x `expected_per_node`,
    laid out node by node, as learnt from every rank's ids. Returns {"world": N, "nodes": [[ranks of node 0],
    ...], "ifname"}: "world" and "nodes" the same on every rank (the checker compares them), "ifname" this
    rank's own GLOO_SOCKET_IFNAME (None if unset; it differs between nodes: each has its own end of the link;
    train.py prints it). A job that starts with a wrong layout still trains, but its HSDP mesh puts a shard
    group across the slow link."""
    # BEGIN SOLUTION Every rank returns the same "world" and "nodes" once it knows every rank's ids (rank,
    #                group rank, local rank, local world size, node identity), and raises unless the world is
    #                expected_nodes x expected_per_node, each rank = group rank x local world + local rank, every node
    #                has expected_per_node ranks, and each node's ranks share one host (hostname + network namespace).
    #                Its "ifname" is this rank's own GLOO_SOCKET_IFNAME (None if unset), which differs by node.
    # HINT 1         The layout is a fact about all ranks together: no rank sees it alone. Ask: what does each rank
    #                know about itself (torchrun's environment), how do all ranks learn everyone's, and what tells
    #                two "nodes" apart when they share a hostname?
    # HINT 2         One small dict per rank from the environment variables torchrun sets, exchanged with
    #                all_gather_object; a node's identity is the hostname plus the inode of /proc/self/ns/net;
    #                group the ranks by GROUP_RANK.
    # HINT 3         me = {rank, group_rank, local_rank, local_world (from RANK, GROUP_RANK, LOCAL_RANK,
    #                LOCAL_WORLD_SIZE), host: f"{hostname}:{os.stat('/proc/self/ns/net').st_ino}"};
    #                dist.all_gather_object into a list of world-size entries; check the count, that every rank ==
    #                group_rank * local_world + local_rank, the node count, ranks per node, one host per node; return
    #                {"world", "nodes": sorted ranks per node, by group rank, "ifname": GLOO_SOCKET_IFNAME}.
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
    """This node's address on its way to `addr`: the source address the kernel picks for a connection to it (a
    UDP socket's connect sends nothing; it only routes). On a cluster it is the node's address on the network
    the job's traffic uses."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((addr, 9))  # the discard port; no packet leaves
        return s.getsockname()[0]


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
