# GENERATED from solutions/lab8_multinode/launch.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""The multi-node launch: what each node's torchrun is told, which interface gloo uses, and a readiness check.

    # on each node: torchrun with that node's options (torchrun_args; main prints them, see its docstring)
    torchrun <this node's torchrun_args> -m labs.lab8_multinode.train
    python -m labs.lab8_multinode.nodes      # both nodes here: two network namespaces (root) or loopback

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
    raise NotImplementedError("TODO(lab8): A list of '--option=value' strings with which each node's torchrun agent "
                              "joins the others in a c10d rendezvous at endpoint (node 0's agent hosts its store) for "
                              "job run_id, starts nproc_per_node workers of an nnodes-node job, advertises local_addr "
                              "(the address the other nodes reach it at), restarts workers up to max_restarts times, "
                              "and declares a silent node dead within 3 s (torchrun's default: 15 s). Only node 0's "
                              "agent hosts the store: another that did would bind the endpoint's port on its own "
                              "machine. (hints: checker hint lab8 launch.torchrun_args)")


def pick_interface(master_addr: str) -> str:
    """The network interface this node reaches `master_addr` through (set it as GLOO_SOCKET_IFNAME, and
    NCCL_SOCKET_IFNAME on GPUs). Without it gloo binds to the address the hostname resolves to, which on a
    cluster is often the management network or, in a container, no interface at all."""
    raise NotImplementedError("TODO(lab8): The name of the interface that links this node to master_addr's node: where "
                              "gloo must listen so that the other nodes' connections reach this one. Every node "
                              "answers its end of that link, node 0 included, though master_addr is its own address "
                              "(the other node cannot reach loopback). Here: each namespace's veth end; in the "
                              "loopback emulation, lo. Not where the hostname resolves (a management network, or in a "
                              "container nothing routable). (hints: checker hint lab8 launch.pick_interface)")


def check_layout(expected_nodes: int, expected_per_node: int) -> dict:
    """Every rank, after init_process_group: raise unless the job is `expected_nodes` x `expected_per_node`,
    laid out node by node, as learnt from every rank's ids. Returns {"world": N, "nodes": [[ranks of node 0],
    ...], "ifname"}: "world" and "nodes" the same on every rank (the checker compares them), "ifname" this
    rank's own GLOO_SOCKET_IFNAME (None if unset; it differs between nodes: each has its own end of the link;
    train.py prints it). A job that starts with a wrong layout still trains, but its HSDP mesh puts a shard
    group across the slow link."""
    raise NotImplementedError("TODO(lab8): Every rank returns the same 'world' and 'nodes' once it knows every rank's "
                              "ids (rank, group rank, local rank, local world size, node identity), and raises unless "
                              "the world is expected_nodes x expected_per_node, each rank = group rank x local world + "
                              "local rank, every node has expected_per_node ranks, and each node's ranks share one "
                              "host (hostname + network namespace). Its 'ifname' is this rank's own GLOO_SOCKET_IFNAME "
                              "(None if unset), which differs by node. (hints: checker hint lab8 launch.check_layout)")


def source_addr(addr: str) -> str:
    """This node's address on its way to `addr`: the source address the kernel picks for a connection to it (a
    UDP socket's connect sends nothing; it only routes). On a cluster it is the node's address on the network
    the job's traffic uses."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((addr, 9))  # the discard port; no packet leaves
        return s.getsockname()[0]


def main(argv=None) -> None:
    """This node's torchrun options on one line, for a batch script (train.sbatch):

        torchrun $(python -c "import sys; from labs.lab8_multinode.launch import main; main(sys.argv[1:])" \\
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
