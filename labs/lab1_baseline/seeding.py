# GENERATED from solutions/lab1_baseline/seeding.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Seeding: the same seed must give the same run, bit for bit, in a fresh process."""
from __future__ import annotations


def seed_everything(seed: int) -> None:
    """Seed every random stream a training run draws from, so that the seed alone decides the run's draws.

    Which generators a run (or a library it calls) can draw from is yours to list: the `reproducible` check draws
    from each one it knows right after calling this, in two fresh processes, with another seed, and again.
    """
    raise NotImplementedError("TODO(lab1): After it returns, every random stream a run, or a library it calls, can "
                              "draw from is a function of seed alone, on every device: two fresh processes given one "
                              "seed train bit-identically and draw the same numbers from each generator; another seed "
                              "changes the draws of every one of them; the same seed again in the same process gives "
                              "its draws again. (hints: checker hint lab1 seeding.seed_everything)")
