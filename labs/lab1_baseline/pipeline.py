# GENERATED from solutions/lab1_baseline/pipeline.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""The input pipeline: keep the model fed while every sample costs CPU time to prepare.

train.py reads its batches from make_loader over labs.common.pipeline.WindowDataset, whose samples
each cost ~1 ms of CPU work (a stand-in for decoding/tokenising). Run train.py and read the log's
`input_stall`: the fraction of each step the model sat waiting for its batch.
"""
from __future__ import annotations

from torch.utils.data import DataLoader

from labs.common import dist as cdist


def make_loader(dataset, batches, device):
    """Yield the training batches (x, y), each (B, T) int64 on `device`, in the order of `batches`.

    dataset   map-style: dataset[i] is one sample (x, y), two (T,) tensors, and takes real CPU time
    batches   an iterable of lists of sample indices, one list per training step (read it once, in order)

    Where and when the work happens decides who waits for it. A batch prepared in this process, after
    the step that needs it asked, makes the model idle for the whole batch; a batch that is ready before
    the step asks costs the step nothing. On a GPU the copy to the device can be hidden too; on CPU there
    is no copy to hide.
    """
    # TODO(lab1): the model waits for every batch (see input_stall in the step log): each batch must be ready
    # before the step asks for it, prepared while the model computes, by the same transform
    # (hints: checker hint lab1 pipeline.make_loader)
    loader = DataLoader(dataset, batch_sampler=batches)
    for x, y in loader:
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
