# GENERATED from solutions/lab1_baseline/state.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Full training state: everything a fresh process needs to continue as if never stopped.

Weights alone are not enough. A resumed run is bit-identical only if everything the uninterrupted run carries
from one step into the next comes back, whether it lives in an object you were handed or not. Listing it is
this file's lesson: for each thing that changes as training runs, ask what the resumed step would do
differently without it. The `resume_exact` check kills a run inside a save and compares the resumed steps, the
final weights and every random stream with the uninterrupted run's.
"""
from __future__ import annotations

from labs.common import checkpoint as ckpt


def save_checkpoint(path, model, optimizer, scheduler, sampler, step: int) -> None:
    """Write the full training state after `step` completed steps to `path`, atomically.

    A kill during the save must leave the previous checkpoint intact. `sampler` has state_dict()/load_state_dict()
    like the model and optimizer.
    """
    raise NotImplementedError("TODO(lab1): Afterwards path holds all a fresh process, built and seeded otherwise, "
                              "needs to take step + 1 exactly as this one would: everything the run carries from one "
                              "step into the next, inside the objects passed in and outside them. Atomic: a kill at "
                              "any moment of the write leaves the previous checkpoint whole at path, never half a "
                              "file. (hints: checker hint lab1 state.save_checkpoint)")


def load_checkpoint(path, model, optimizer, scheduler, sampler) -> int:
    """Restore what save_checkpoint wrote into the given objects; return the saved step.

    The objects are freshly built (and possibly differently initialised): after this call the
    next training step must be exactly the step the uninterrupted run would have taken.
    """
    raise NotImplementedError("TODO(lab1): Into freshly built objects, initialised and seeded differently, restore "
                              "everything the save wrote, and return the saved step: the next step must then be "
                              "bit-identical to the one the uninterrupted run took, loss and weights alike, and right "
                              "after the return every random stream the run can draw from stands where it stood at the "
                              "save (the checker compares them: on a GPU dropout draws there). (hints: checker hint "
                              "lab1 state.load_checkpoint)")
