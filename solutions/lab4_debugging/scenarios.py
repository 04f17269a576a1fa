"""Each incident's conditions: what `run.py` (and the checker) set up before launching the job.

Not an exercise, and not where the faults are: the faults are in incidentN.py; these are the
circumstances that expose them (an allocation bigger than the launch, a NaN on one rank, a port
already taken...). `variant` moves ranks, steps and names around: the checker's hidden variants
use it, so a fix must be general rather than tuned to the numbers below.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NPROC = 2
BUSY_PORT = 29500  # torchrun's default port: the one another job on the node is most likely to hold
HANG_TIMEOUT_S = 6.0  # process-group timeout where a hang is expected: a hang becomes an error this fast


@dataclass
class Scenario:
    incident: int
    job: dict                        # Job fields (job.py)
    env: dict = field(default_factory=dict)
    nproc: int = NPROC
    busy_port: int | None = None     # held by "another job" while this one starts
    concurrent_jobs: int = 1         # jobs started at once on this node
    kill_after_save: bool = False    # preempted right after its checkpoint, then resumed
    budget_s: float = 45.0           # run.py kills the job after this long (stacks first)


def scenario(incident: int, variant: int = 0) -> Scenario:
    v = variant
    base_env: dict = {}
    if incident == 1:   # launched with 2 processes (3 in odd variants) inside an allocation of more tasks
        env = {**base_env, "SLURM_NTASKS": str(4 + v % 3)}
        if v:  # torchrun started from a batch script: every rank inherits the batch step's task id
            env["SLURM_PROCID"] = "0"
        return Scenario(1, {"timeout_s": HANG_TIMEOUT_S}, env, nproc=NPROC + v % 2)
    if incident == 2:   # one rank's loss is NaN (inf in variants 2 and 3 mod 4: an overflow) at one step
        return Scenario(2, {"timeout_s": HANG_TIMEOUT_S, "nan_at": [1 - v % 2, 3 + v % 4], "steps": 10,
                            "bad_loss": "inf" if v % 4 >= 2 else "nan"}, base_env)
    if incident == 3:   # the dashboard reads from one rank
        return Scenario(3, {"steps": 12, "eval_every": 4 if v % 3 == 0 else 3, "dashboard_rank": 1 - v % 2}, base_env)
    if incident == 4:   # the epoch is not a multiple of the world size any more
        per_step = 4  # Job.batch
        return Scenario(4, {"timeout_s": HANG_TIMEOUT_S, "steps": 100,
                            "num_samples": NPROC * per_step * (6 + v % 3) + 1 + 2 * (v % 2)}, base_env)
    if incident == 5:   # preempted after a checkpoint, then resumed
        return Scenario(5, {"steps": 12, "save_at": 5 + v % 3}, base_env, kill_after_save=True)
    if incident == 6:   # the cluster's module file names an interface this node does not have
        return Scenario(6, {"timeout_s": HANG_TIMEOUT_S},
                        {**base_env, "COURSE_IFNAME": ["ib0", "eth9", "ens5f1"][v % 3]})
    if incident == 7:   # another job already runs on this node; and two of ours start together
        return Scenario(7, {"steps": 6}, base_env, busy_port=BUSY_PORT, concurrent_jobs=2)
    if incident == 8:   # a 0.01 GB/s link between the ranks, emulated in-process (see slowlink.py)
        return Scenario(8, {"steps": 6, "micro_batches": 4, "link_gbps": 0.01, "link_latency_ms": 2.0}, base_env)
    raise ValueError(f"incidents are 1-8, not {incident}")


INCIDENTS = list(range(1, 9))
