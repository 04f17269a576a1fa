# GENERATED from solutions/lab5_scheduler/restart.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Where a (re)started job continues from.

A requeued Slurm job is the same job again: same job id, same script, same output folder, with
SLURM_RESTART_COUNT one higher. What it must not trust is its own memory of how far it got: the
previous run may have been warned (and saved at the step it stopped) or killed outright (and
left only its last periodic checkpoint). The checkpoint on disk is the truth, and lab 2's
atomic writes (write a temporary file, then rename) mean it is either the old one or the new
one, never half of each.
"""
from __future__ import annotations


def resume(ckpt_path, restart_count: int, model, optimizer, scheduler, sampler) -> int:
    """The step to continue from (0: from scratch), with the training objects in the state that step needs."""
    raise NotImplementedError("TODO(lab5): Afterwards model, optimizer, scheduler and sampler hold exactly what the "
                              "run that saved ckpt_path had at the returned step, so the losses from there on are "
                              "bit-identical to an uninterrupted run's; with nothing saved yet the step is 0. A job "
                              "that has run before (restart_count > 0) and finds nothing has lost its work: that must "
                              "show in its log (one line, rank 0), never pass as a fresh start. Lab 2's per-rank RNG "
                              "and sampler state belong to one world size: a checkpoint saved at another one is never "
                              "loaded, and the error names both sizes. (hints: checker hint lab5 restart.resume)")
