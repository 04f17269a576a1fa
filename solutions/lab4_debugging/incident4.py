"""Incident 4 — "After the dataset was cleaned (a few samples removed), the job hangs at the end of its epoch."

Reproduce, diagnose, fix `shard_indices` below:

    python -m labs.lab4_debugging.run 4
"""
from __future__ import annotations


def shard_indices(n: int, rank: int, world: int) -> list[int]:
    """This rank's sample ids, in order, for one epoch over samples 0..n-1 (disjoint across ranks)."""
    # BEGIN SOLUTION
    # Every step ends in an all-reduce that needs every rank, so every rank must run the same number of
    # steps. Strided shards of n samples differ in length by one when n % world != 0, and the longer
    # shard's extra (short) batch waits in an all-reduce nobody else joins. Drop the n % world
    # remainder (at most world-1 samples an epoch), or pad by repeating a few, as DistributedSampler does.
    return list(range(rank, n - n % world, world))
    # STARTER
    # return list(range(rank, n, world))  # every sample used exactly once
    # END SOLUTION
