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

    Use labs.common.checkpoint.atomic_save (a kill during the save must leave the previous
    checkpoint intact) and labs.common.checkpoint.rng_state() for the random streams.
    `sampler` has state_dict()/load_state_dict() like the model and optimizer.
    """
    # BEGIN SOLUTION build one dict with the state_dict() of model, optimizer, scheduler and sampler, the step and
    #                ckpt.rng_state(); write it with ckpt.atomic_save
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
    # BEGIN SOLUTION ckpt.load(path), then load_state_dict on model, optimizer, scheduler, sampler, ckpt.set_rng_state,
    #                return the step
    state = ckpt.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    ckpt.set_rng_state(state["rng"])
    return state["step"]
    # END SOLUTION
