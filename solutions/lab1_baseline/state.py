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
    # BEGIN SOLUTION Afterwards path holds all a fresh process, built and seeded otherwise, needs to take step + 1
    #                exactly as this one would: everything the run carries from one step into the next, inside the
    #                objects passed in and outside them. Atomic: a kill at any moment of the write leaves the previous
    #                checkpoint whole at path, never half a file.
    # HINT 1         List what changes as training runs, not only the weights: for each piece, what would the resumed
    #                step do differently if it were lost? Look beyond the four objects you are handed. And what does a
    #                kill halfway through an ordinary write leave on disk?
    # HINT 2         The state: the weights; the optimizer's moments (AdamW: 8 B/param; without them, a loss spike); the
    #                schedule's position (else warm-up again); the sampler's data position (else batches repeat); the
    #                step; every RNG stream (else other dropout masks). One dict: each object's state_dict(), the step
    #                and ckpt.rng_state() (labs.common.checkpoint); written once with ckpt.atomic_save (a temporary
    #                file, then a rename).
    # HINT 3         state = {'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'scheduler':
    #                scheduler.state_dict(), 'sampler': sampler.state_dict(), 'step': step, 'rng': ckpt.rng_state()};
    #                ckpt.atomic_save(state, path).
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "sampler": sampler.state_dict(),
        "step": step,
        "rng": ckpt.rng_state(),
    }
    ckpt.atomic_save(state, path)
    # END SOLUTION


def load_checkpoint(path, model, optimizer, scheduler, sampler) -> int:
    """Restore what save_checkpoint wrote into the given objects; return the saved step.

    The objects are freshly built (and possibly differently initialised): after this call the
    next training step must be exactly the step the uninterrupted run would have taken.
    """
    # BEGIN SOLUTION Into freshly built objects, initialised and seeded differently, restore everything the save wrote,
    #                and return the saved step: the next step must then be bit-identical to the one the uninterrupted
    #                run took, loss and weights alike, and right after the return every random stream the run can draw
    #                from stands where it stood at the save (the checker compares them: on a GPU dropout draws there).
    # HINT 1         Resume is the save in reverse: every piece goes back into the object it came from. Which piece is
    #                easy to forget because it lives in no object you were handed, and could anything run after
    #                restoring it disturb it?
    # HINT 2         ckpt.load the file; each object's load_state_dict; ckpt.set_rng_state for the random streams; the
    #                step is the return value.
    # HINT 3         state = ckpt.load(path); model, optimizer, scheduler, sampler: .load_state_dict(state[<its key>]);
    #                ckpt.set_rng_state(state['rng']); return state['step'].
    state = ckpt.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    ckpt.set_rng_state(state["rng"])
    return state["step"]
    # END SOLUTION
