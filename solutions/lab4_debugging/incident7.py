"""Incident 7 — "When two of us train on the same node, the second job dies at once; alone, each works."

`run.py` starts every job with torchrun and the arguments below. Reproduce (the script starts the
job on a node where another job is already running), diagnose, fix `launch_args`:

    python -m labs.lab4_debugging.run 7
"""
from __future__ import annotations


def launch_args(nproc: int) -> list[str]:
    """torchrun's options (everything before the module to run) for an nproc-rank job on this node."""
    # BEGIN SOLUTION Returns torchrun's options for an nproc-rank job on this node such that any number of such jobs can
    #                start on the same node at the same time, each with a private rendezvous; the options never choose
    #                what runs (no module, no script).
    # HINT 1         Read the second job's first error. What does every job launched with these options ask the node
    #                for, and can two processes hold it at once?
    # HINT 2         launch_args fixes the rendezvous address and port: every job on the node asks for the same port,
    #                and only the first can bind it.
    # HINT 3         Return ["--standalone", f"--nproc-per-node={nproc}"]: torchrun then runs a private rendezvous on a
    #                port the OS picks (it binds port 0).
    # A fixed port is shared by every job on the node: the second job's rendezvous store cannot bind it
    # (EADDRINUSE), or, with another launcher, joins the first job's store. --standalone runs a private
    # rendezvous on a port the OS picks (it binds port 0), so any number of jobs can share a node.
    return ["--standalone", f"--nproc-per-node={nproc}"]
    # STARTER
    # return ["--nnodes=1", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", "--master-port=29500"]
    # END SOLUTION
