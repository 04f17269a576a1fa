# GENERATED from solutions/lab4_debugging/incident7.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Incident 7 — "When two of us train on the same node, the second job dies at once; alone, each works."

`run.py` starts every job with torchrun and the arguments below. Reproduce (the script starts the
job on a node where another job is already running), diagnose, fix `launch_args`:

    python -m labs.lab4_debugging.run 7
"""
from __future__ import annotations


def launch_args(nproc: int) -> list[str]:
    """torchrun's options (everything before the module to run) for an nproc-rank job on this node."""
    return ["--nnodes=1", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", "--master-port=29500"]
