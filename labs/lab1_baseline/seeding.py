# GENERATED from solutions/lab1_baseline/seeding.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Seeding: the same seed must give the same run, bit for bit, in a fresh process."""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed every random stream a training run draws from.

    Three generators matter: Python's `random`, NumPy's global generator and torch's (which
    also seeds every GPU's generator). Model initialisation and dropout draw from torch's.
    """
    raise NotImplementedError("TODO(lab1): seed python's random, numpy's global generator and torch (manual_seed)")
