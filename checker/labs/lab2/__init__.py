"""Lab 2 checks: sharding, DDP == one process on the global batch, sync, no_sync, overlap, speed, resume.

Every multi-rank run is checker.worker on 2 ranks (3 in odd hidden variants), started as torchrun would
(checker/spawn.py). The checker drives the learner's wrappers with its own loop and data, compares against a
single-process model it trains itself on rank 0, and counts all-reduces with its own recorder.

The worker side (tasks.py) runs next to the learner's code; the parent side (checks.py, plan.py) starts the runs and
compares. What both sides read is here: the resume runs' length and the differential step's plan.
"""
LAB = "lab2"
WORLD_SIZE = 2
WHERE = "labs/lab2_ddp"
N_STEPS, SAVE_AT = 16, 6
STEP_PLAN = [(3, 1.0), (1, 1.0), (3, 5.0), (2, 1.0)]  # (micro-batches, logit scale: x5 forces the clip)
