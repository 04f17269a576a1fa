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
    # BEGIN SOLUTION Every rank of this launch joins one process group, the one the launcher described, each rank in its
    #                own place; the environment returned describes that group and this process's device; a collective
    #                that waits longer than timeout_s raises instead of hanging.
    # HINT 1         Read the first lines each rank logs (its launch environment) and how the job ends. How many
    #                processes were started, and how many does the process group wait for? Where does each number come
    #                from?
    # HINT 2         The world size in join: it is read from a variable that describes something other than this launch.
    # HINT 3         Size the group from what the launcher exported (WORLD_SIZE, RANK, LOCAL_RANK), never from the
    #                scheduler's allocation (SLURM_NTASKS): return cdist.init(timeout_s=timeout_s), which reads exactly
    #                those.
    # Only the launcher that started this process knows how many processes it started and which one
    # this is: torchrun exports WORLD_SIZE, RANK and LOCAL_RANK. SLURM_NTASKS describes the allocation
    # (4 tasks), not this launch (2 processes): a group sized from it waits for 2 ranks that never come.
    # cdist.init reads torchrun's variables and nothing else.
    return cdist.init(timeout_s=timeout_s)
    # STARTER
    # local_rank = int(os.environ.get("LOCAL_RANK", 0))
    # device, backend = cdist.pick_device(os.environ.get("COURSE_DEVICE", "auto"), local_rank)
    # # On the cluster every rank is a Slurm task, so the allocation says how big the job is.
    # world = int(os.environ.get("SLURM_NTASKS", os.environ["WORLD_SIZE"]))
    # rank = int(os.environ["RANK"])
    # dist.init_process_group(backend, world_size=world, rank=rank,
    #                         timeout=datetime.timedelta(seconds=timeout_s))
    # return cdist.DistEnv(rank, world, local_rank, device, backend)
    # END SOLUTION
