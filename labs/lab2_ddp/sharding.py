# GENERATED from solutions/lab2_ddp/sharding.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Rank-sharded data: every rank reads its own slice of one global batch.

With G = batch_size x world_size windows in the global batch, what must hold at every step:
  - all ranks agree on the epoch's order without a message (lab 1's BatchSampler orders an epoch by
    (seed, epoch) alone);
  - the ranks' batches are disjoint, and an epoch shows every window at most once across ranks;
  - concatenated in rank order they are exactly the batch of G windows a single process reads at that
    step, which is what makes "DDP == one process on the global batch" true, and testable (the checker
    compares your ids with that split at world sizes 2 and 3, across epoch ends with a ragged tail);
  - the sampler's state is the same on every rank, and still means the same data if the job resumes
    at another world size.
"""
from __future__ import annotations

import numpy as np

from labs.common.data import BatchSampler


class ShardedSampler(BatchSampler):
    def __init__(self, num_windows: int, batch_size: int, rank: int, world_size: int, seed: int = 0):
        """batch_size is per rank; the global batch is batch_size * world_size windows."""
        raise NotImplementedError("TODO(lab2): Afterwards the sampler's inherited state (lab 1's, which state_dict "
                                  "saves and set_epoch resets) is identical on every rank and counts positions in the "
                                  "sequence of global batches, so that a checkpoint's position means the same data at "
                                  "any world size; and the sampler knows this rank, the world size and the per-rank "
                                  "batch, which next_ids needs. (hints: checker hint lab2 sharding.ShardedSampler)")

    def next_ids(self) -> np.ndarray:
        """This rank's window ids for the next global step."""
        raise NotImplementedError("TODO(lab2): Returns this rank's batch_size window ids for the next step, and "
                                  "advances the sampler by one global step on every rank alike. The ids of ranks 0, 1, "
                                  "..., N-1 of one step, concatenated in that order, are exactly the global batch a "
                                  "single process's sampler would yield next: so the ranks' batches are disjoint, each "
                                  "epoch shows every window at most once (the ragged tail is dropped), and DDP equals "
                                  "one process on the global batch, testably. (hints: checker hint lab2 "
                                  "sharding.next_ids)")

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning (its order is reshuffled by the (seed, epoch) generator)."""
        raise NotImplementedError("TODO(lab2): Afterwards the sampler stands at the very beginning of `epoch`, "
                                  "whatever it read before: the next call returns this rank's block of that epoch's "
                                  "first global batch, in the epoch's (seed, epoch) order. Every rank that calls it "
                                  "stands at the same position, and state_dict then describes that position. (hints: "
                                  "checker hint lab2 sharding.set_epoch)")
