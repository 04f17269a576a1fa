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

from pathlib import Path

import torch.distributed as dist

from labs.common import checkpoint as ckpt

from ..lab2_ddp.state import load_checkpoint


def resume(ckpt_path, restart_count: int, model, optimizer, scheduler, sampler) -> int:
    """Load the checkpoint if there is one; return the step to continue from (0: from scratch).

    Refuse a checkpoint written at another world size (lab 2's per-rank RNG and sampler state are
    per rank), and say so when a restarted job finds nothing: that is a lost run, not a fresh one.
    """
    raise NotImplementedError("TODO(lab5): Returns the step to continue from. No checkpoint at the path: 0, and on a "
                              "restarted run (restart count above 0) rank 0 warns that the run was lost. A checkpoint "
                              "written at another world size: a clear error naming both sizes (per-rank RNG and "
                              "sampler state cannot be reused). Otherwise model, optimizer, scheduler and sampler are "
                              "restored and the saved step returned. (hints: checker hint lab5 restart.resume)")
