# GENERATED from solutions/lab4_debugging/incident4.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Incident 4 — "After the dataset was cleaned (a few samples removed), the job hangs at the end of its epoch."

Reproduce, diagnose, fix `shard_indices` below:

    python -m labs.lab4_debugging.run 4
"""
from __future__ import annotations


def shard_indices(n: int, rank: int, world: int) -> list[int]:
    """This rank's sample ids, in increasing order, for one epoch over samples 0..n-1 (disjoint across ranks)."""
    return list(range(rank, n, world))  # every sample used exactly once
