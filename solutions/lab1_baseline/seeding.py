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
    # BEGIN SOLUTION After it returns, every random stream a run draws from is a function of seed alone: Python's,
    #                NumPy's global generator and torch's (which also drives every GPU's, and with it model
    #                initialisation and dropout). Two fresh processes given one seed then train bit-identically; another
    #                seed changes the draws of all three.
    # HINT 1         A generator nobody seeds starts from fresh OS entropy in every new process. Which generators can a
    #                training run, or a library it calls, draw from, and does seeding one of them reach the others?
    # HINT 2         One seeding call per generator: the random module's, numpy.random's global one, torch's manual seed
    #                (which seeds the CUDA generators too).
    # HINT 3         random.seed(seed); np.random.seed(seed); torch.manual_seed(seed).
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # END SOLUTION
