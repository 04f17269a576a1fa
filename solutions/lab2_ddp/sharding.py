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
        # BEGIN SOLUTION Afterwards the sampler's inherited state (lab 1's, which state_dict saves and set_epoch
        #                resets) is identical on every rank and counts positions in the sequence of global batches,
        #                so that a checkpoint's position means the same data at any world size; and the sampler knows
        #                this rank, the world size and the per-rank batch, which next_ids needs.
        # HINT 1         Every rank must agree on which windows make the global batch of each step, without a message.
        #                What would a single process training on the whole global batch hold as its sampler, and could
        #                every rank hold that same one?
        # HINT 2         The parent's constructor (labs/common/data.py's BatchSampler), given the global batch size
        #                (batch_size x world_size) and the same seed on every rank; keep rank, world_size and batch_size
        #                on self.
        # HINT 3         super().__init__(num_windows, batch_size * world_size, seed); self.rank, self.world_size,
        #                self.local_batch = rank, world_size, batch_size.
        super().__init__(num_windows, batch_size * world_size, seed)
        self.rank, self.world_size, self.local_batch = rank, world_size, batch_size
        # END SOLUTION

    def next_ids(self) -> np.ndarray:
        """This rank's window ids for the next global step."""
        # BEGIN SOLUTION Returns this rank's batch_size window ids for the next step, and advances the sampler by one
        #                global step on every rank alike. The ids of ranks 0, 1, ..., N-1 of one step, concatenated in
        #                that order, are exactly the global batch a single process's sampler would yield next: so the
        #                ranks' batches are disjoint, each epoch shows every window at most once (the ragged tail is
        #                dropped), and DDP equals one process on the global batch, testably.
        # HINT 1         Every rank must agree on the epoch's order without talking to the others. If each rank computes
        #                the same global batch, how does it pick its part so the parts tile it in rank order?
        # HINT 2         The parent class (lab 1's BatchSampler), built in the constructor with the global batch size,
        #                already yields the next global batch and advances the shared cursor: take one contiguous slice
        #                of it.
        # HINT 3         global_ids = super().next_ids(); return global_ids[self.rank * self.local_batch: (self.rank +
        #                1) * self.local_batch].
        global_ids = super().next_ids()
        return global_ids[self.rank * self.local_batch: (self.rank + 1) * self.local_batch]
        # END SOLUTION

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning (its order is reshuffled by the (seed, epoch) generator)."""
        # BEGIN SOLUTION Afterwards the sampler stands at the very beginning of `epoch`, whatever it read before: the
        #                next call returns this rank's block of that epoch's first global batch, in the epoch's (seed,
        #                epoch) order. Every rank that calls it stands at the same position, and state_dict then
        #                describes that position.
        # HINT 1         The sampler's whole state is two integers. Which two, and what must each be for an epoch to
        #                start from its beginning?
        # HINT 2         Two attributes inherited from BatchSampler (labs/common/data.py): the epoch and the cursor into
        #                its order.
        # HINT 3         self.epoch, self.cursor = epoch, 0.
        self.epoch, self.cursor = epoch, 0
        # END SOLUTION
