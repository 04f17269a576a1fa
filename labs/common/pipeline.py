"""An input pipeline that costs real CPU time per sample, as real ones do (lab 1's input-pipeline exercise).

Real pipelines decode, tokenise, augment or decompress every sample before the model sees it. Here
that work is a stand-in transform that burns `cost_s` of CPU time per sample and returns the tokens
unchanged, so a slow pipeline and a fast one train on exactly the same data.

The arithmetic of a stall: `tiny` computes a 16 x 64 step in ~28 ms on one core. At 1 ms per sample a
batch costs 16 ms to prepare; done in the training process, between steps, every step takes
28 + 16 = 44 ms and the model waits 16/44 = 36% of the time. Preparation that runs while the model
computes costs the step nothing, as long as it delivers a batch at least every 28 ms: what is left is
handing the batch over. Who can do that work, and how many of them it takes, is lab 1's question. Treat
the transform as code you do not own: make it run elsewhere, not cheaper.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset


def transform(tokens: np.ndarray, cost_s: float) -> np.ndarray:
    """The stand-in per-sample work: `cost_s` seconds of this thread's CPU time (hashing the sample over
    and over), whatever the machine's speed. The tokens come back unchanged."""
    end = time.thread_time() + cost_s
    digest = tokens.tobytes()
    while time.thread_time() < end:
        digest = hashlib.blake2b(digest).digest()
    return tokens


class WindowDataset(Dataset):
    """Sample i = window i of a token file, as (x, y): two (T,) int64 tensors, y = x shifted by one.
    The same windows as labs.common.data.TokenFile.batch, one sample at a time, after `transform`.

    `prepared_here` counts the samples prepared on the thread that built the dataset (the training
    thread); samples prepared in any other thread or process leave it at 0. Every sample it counts, the
    model waited for.
    """

    def __init__(self, directory, seq_len: int, cost_s: float = 1e-3, split: str = "train"):
        self.path = Path(directory) / f"{split}.bin"
        self.seq_len, self.cost_s = seq_len, cost_s
        self._tokens = None
        self.owner, self.prepared_here = (os.getpid(), threading.get_ident()), 0

    def tokens(self) -> np.ndarray:
        if self._tokens is None:  # opened lazily, in each process: a worker maps the file itself
            self._tokens = np.memmap(self.path, dtype=np.uint16, mode="r")
        return self._tokens

    def __len__(self) -> int:
        return (len(self.tokens()) - 1) // self.seq_len

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if (os.getpid(), threading.get_ident()) == self.owner:
            self.prepared_here += 1
        T = self.seq_len
        window = transform(np.array(self.tokens()[i * T: i * T + T + 1]), self.cost_s)
        t = torch.from_numpy(window.astype(np.int64))
        return t[:-1], t[1:]

    def __getstate__(self) -> dict:
        # A worker started by spawn/forkserver gets a pickled copy: send the path, not 8 MB of tokens.
        return {**self.__dict__, "_tokens": None}
