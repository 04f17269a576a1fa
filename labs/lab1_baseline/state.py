# GENERATED from solutions/lab1_baseline/state.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Full training state: everything a fresh process needs to continue as if never stopped.

Weights alone are not enough. A resumed run is bit-identical only if it also restores
  - the optimizer's moments (AdamW's exp_avg/exp_avg_sq: without them the first steps
    after resume take bias-corrected steps from zero, a visible loss spike),
  - the LR schedule's position (else warm-up restarts),
  - the step counter and the data position (else samples repeat or are skipped),
  - every RNG stream (else dropout masks differ from the uninterrupted run).
"""
from __future__ import annotations

from labs.common import checkpoint as ckpt


def save_checkpoint(path, model, optimizer, scheduler, sampler, step: int) -> None:
    """Write the full training state after `step` completed steps to `path`, atomically.

    A kill during the save must leave the previous checkpoint intact, and the random streams are part of
    the state (labs.common.checkpoint has helpers for both). `sampler` has state_dict()/load_state_dict()
    like the model and optimizer.
    """
    raise NotImplementedError("TODO(lab1): Afterwards path holds all a fresh process needs to take step + 1 exactly as "
                              "this one would: weights, the optimizer's moments (AdamW: 8 B/param), the schedule's "
                              "position, the data position, the step and every RNG stream. Atomic: a kill during the "
                              "write leaves the previous checkpoint whole, never half a file. (hints: checker hint "
                              "lab1 state.save_checkpoint)")


def load_checkpoint(path, model, optimizer, scheduler, sampler) -> int:
    """Restore what save_checkpoint wrote into the given objects; return the saved step.

    The objects are freshly built (and possibly differently initialised): after this call the
    next training step must be exactly the step the uninterrupted run would have taken.
    """
    raise NotImplementedError("TODO(lab1): Into freshly built objects, initialised and seeded differently, restore "
                              "everything the save wrote, and return the saved step: the next step must then be "
                              "bit-identical to the one the uninterrupted run took, loss and weights alike. (hints: "
                              "checker hint lab1 state.load_checkpoint)")
