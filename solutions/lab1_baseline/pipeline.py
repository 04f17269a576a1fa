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

    Where the work happens decides who waits for it. With num_workers=0 the DataLoader prepares each
    batch in this process, after the step that needed it asked: the model idles for the whole batch.
    With k worker processes (num_workers=k) batches are prepared in parallel with training, and each
    worker keeps `prefetch_factor` batches ready ahead of the step that will ask for them. Pinned
    memory (pin_memory) lets a GPU copy a batch while it computes (non_blocking=True); on CPU there
    is no copy to hide.
    """
    # BEGIN SOLUTION prepare batches in DataLoader worker processes (num_workers, prefetch_factor) so they are ready
    #                before the step asks; pin_memory on a GPU
    # 16 samples x 1 ms = 16 ms of transform per batch against a ~28 ms step: one worker keeps up if it has
    # a core to itself, two leave headroom on a busy machine; each keeps 4 batches ready.
    loader = DataLoader(dataset, batch_sampler=batches, num_workers=2, prefetch_factor=4,
                        pin_memory=cdist.pin_memory(device))
    # STARTER
    # # TODO(lab1): the model waits for every batch (see input_stall in the step log): prepare batches in
    # # DataLoader worker processes (num_workers, prefetch_factor) so they are ready before the step asks
    # loader = DataLoader(dataset, batch_sampler=batches)
    # END SOLUTION
    for x, y in loader:
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
