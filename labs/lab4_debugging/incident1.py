# GENERATED from solutions/lab4_debugging/incident1.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Incident 1 — "The 2-rank job prints nothing after start-up, then dies a few minutes later."

It was launched with torchrun from a shell inside a Slurm allocation (`salloc -n 4`), as the
team always does. Reproduce it, read the log, diagnose, fix `join` below:

    python -m labs.lab4_debugging.run 1
"""
from __future__ import annotations

import datetime  # noqa: F401 (the team's version below uses these)
import os  # noqa: F401

import torch.distributed as dist  # noqa: F401

from labs.common import dist as cdist


def join(timeout_s: float) -> cdist.DistEnv:
    """Join the job's process group (every rank calls this once, first); return this rank's DistEnv.
    `timeout_s` bounds every collective, so a rank waiting for a peer that never comes raises."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device, backend = cdist.pick_device(os.environ.get("COURSE_DEVICE", "auto"), local_rank)
    # On the cluster every rank is a Slurm task, so the allocation says how big the job is.
    world = int(os.environ.get("SLURM_NTASKS", os.environ["WORLD_SIZE"]))
    rank = int(os.environ["RANK"])
    dist.init_process_group(backend, world_size=world, rank=rank,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return cdist.DistEnv(rank, world, local_rank, device, backend)
