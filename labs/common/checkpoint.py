"""Checkpoint mechanics: atomic writes and RNG state. *What* goes into a checkpoint is lab 1's exercise.

Atomic: write to a temporary file in the same directory, fsync it, rename it over the target,
fsync the directory. rename() is atomic on POSIX filesystems, so a reader (or a resumed job)
sees either the old complete file or the new complete file, never half of one; a SIGKILL or
a preemption in the middle of `torch.save` leaves only a stray temporary file behind.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from . import dist as cdist


def atomic_save(obj, path: str | os.PathLike) -> Path:
    return _atomic_write(path, lambda f: torch.save(obj, f))


def atomic_write_text(text: str, path: str | os.PathLike) -> Path:
    """The same guarantee for a small text file (a `latest` pointer)."""
    return _atomic_write(path, lambda f: f.write(text.encode()))


def _atomic_write(path, write) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    return path


def load(path: str | os.PathLike, map_location="cpu") -> dict:
    """weights_only=True: a checkpoint is data, never code to run (torch.load's pickle can run code)."""
    return torch.load(path, map_location=map_location, weights_only=True)


def rng_state() -> dict:
    """Every random stream a training step can draw from: python, numpy, torch CPU, the device's."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        # numpy's key array becomes a tensor so the checkpoint loads with weights_only=True.
        "numpy": (np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]),
        "torch": torch.get_rng_state(),
        "device": cdist.device_rng_state(),
    }


def set_rng_state(state: dict) -> None:
    random.setstate(_as_tuple(state["python"]))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy(), *rest))
    torch.set_rng_state(state["torch"])
    cdist.set_device_rng_state(state["device"])


def _as_tuple(x):
    return tuple(_as_tuple(i) for i in x) if isinstance(x, (list, tuple)) else x
