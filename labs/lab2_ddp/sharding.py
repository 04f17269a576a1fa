# GENERATED from solutions/lab2_ddp/sharding.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Rank-sharded data: every rank reads its own slice of one global batch.

All ranks compute the same epoch order (seeded by (seed, epoch), lab 1's BatchSampler). Global
step s covers windows order[s*G : (s+1)*G] with G = batch_size * world_size; rank r takes the
r-th block of batch_size of them. So:
  - the ranks' batches are disjoint, and an epoch shows every window once across ranks;
  - concatenated in rank order they are exactly the batch a single process with batch G reads,
    which is what makes "DDP == one process on the global batch" true, and testable;
  - the sampler's state (epoch, global cursor) is the same on every rank, and still means the
    same data if the job resumes at another world size.
"""
from __future__ import annotations

import numpy as np

from labs.common.data import BatchSampler


class ShardedSampler(BatchSampler):
    def __init__(self, num_windows: int, batch_size: int, rank: int, world_size: int, seed: int = 0):
        """batch_size is per rank; the global batch is batch_size * world_size windows."""
        super().__init__(num_windows, batch_size * world_size, seed)
        self.rank, self.world_size, self.local_batch = rank, world_size, batch_size

    def next_ids(self) -> np.ndarray:
        """This rank's window ids for the next global step."""
        raise NotImplementedError("TODO(lab2): Rank r gets the r-th block of local_batch ids (the inherited batch size "
                                  "is the global one, local_batch x world_size) of the global batch one process's "
                                  "sampler would yield next. So the ranks' batches are disjoint, each epoch shows "
                                  "every window at most once (the ragged tail is dropped), and in rank order they are "
                                  "one process's batch: what makes DDP equal one process on the global batch, "
                                  "testably. (hints: checker hint lab2 sharding.next_ids)")

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning (its order is reshuffled by the (seed, epoch) generator)."""
        raise NotImplementedError("TODO(lab2): Afterwards the next call yields the first global batch of the given "
                                  "epoch, in that epoch's (seed, epoch) order, which every rank computes alike: the "
                                  "same position on every rank, and the same data at any world size. (hints: checker "
                                  "hint lab2 sharding.set_epoch)")
