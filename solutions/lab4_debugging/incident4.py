"""Incident 4 — "After the dataset was cleaned (a few samples removed), the job hangs at the end of its epoch."

Reproduce, diagnose, fix `shard_indices` below:

    python -m labs.lab4_debugging.run 4
"""
from __future__ import annotations


def shard_indices(n: int, rank: int, world: int) -> list[int]:
    """This rank's sample ids, in increasing order, for one epoch over samples 0..n-1 (disjoint across ranks)."""
    # BEGIN SOLUTION Returns this rank's sample ids for the epoch, in increasing order, with the same count on every
    #                rank for any n and world size, every id in 0..n-1, and no sample on two ranks (dropping up to world
    #                − 1 samples, or repeating a few to pad, is allowed): every rank then runs the same number of steps.
    # HINT 1         Read each rank's "samples this epoch" line and the last step each rank reached before the hang. Do
    #                the ranks agree? What does every step end with that needs all ranks?
    # HINT 2         shard_indices: strided shards of n samples differ in length by one whenever n is not a multiple of
    #                the world size; the longer shard's extra step waits for peers that have finished the epoch.
    # HINT 3         Stride over the first n - n % world samples only (drop the remainder), or pad the short shards by
    #                repeating a few samples, as DistributedSampler does.
    # Every step ends in an all-reduce that needs every rank, so every rank must run the same number of
    # steps. Strided shards of n samples differ in length by one when n % world != 0, and the longer
    # shard's extra (short) batch waits in an all-reduce nobody else joins. Drop the n % world
    # remainder (at most world-1 samples an epoch), or pad by repeating a few, as DistributedSampler does.
    return list(range(rank, n - n % world, world))
    # STARTER
    # return list(range(rank, n, world))  # every sample used exactly once
    # END SOLUTION
