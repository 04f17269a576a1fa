"""Seeding: the same seed must give the same run, bit for bit, in a fresh process."""
from __future__ import annotations


def seed_everything(seed: int) -> None:
    """Seed every random stream a training run draws from, so that the seed alone decides the run's draws.

    Which generators a run (or a library it calls) can draw from is yours to list: the `reproducible` check draws
    from each one it knows right after calling this, in two fresh processes, with another seed, and again.
    """
    # BEGIN SOLUTION After it returns, every random stream a run, or a library it calls, can draw from is a function
    #                of seed alone, on every device: two fresh processes given one seed train bit-identically and
    #                draw the same numbers from each generator; another seed changes the draws of every one of them;
    #                the same seed again in the same process gives its draws again.
    # HINT 1         A generator nobody seeds starts from fresh OS entropy in every new process. Which generators can a
    #                training run, or a library it calls, draw from, and does seeding one of them reach the others?
    # HINT 2         Three generators matter: Python's random module, NumPy's global one (numpy.random) and torch's,
    #                whose manual seed also seeds every GPU's generator (model initialisation and dropout draw from
    #                torch's). One seeding call each, with seed itself.
    # HINT 3         import random, numpy as np and torch; random.seed(seed); np.random.seed(seed);
    #                torch.manual_seed(seed).
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # END SOLUTION
