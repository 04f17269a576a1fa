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
    raise NotImplementedError("TODO(lab1): After it returns, every random stream a run draws from is a function of "
                              "seed alone: Python's, NumPy's global generator and torch's (which also drives every "
                              "GPU's, and with it model initialisation and dropout). Two fresh processes given one "
                              "seed then train bit-identically; another seed changes the draws of all three. (hints: "
                              "checker hint lab1 seeding.seed_everything)")
