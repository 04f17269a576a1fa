"""Lab 3 checks: ZeRO-1 by hand, FSDP2, DeepSpeed ZeRO 0-3, sharded (DCP) resume, the price in speed.

Bytes are counted by the checker from the tensors each rank really holds (DTensor local shards,
the learner's local optimizer state, DeepSpeed's partitions) and compared with the ZeRO formulas.
The worker side (tasks.py; zero.py for ZeRO-1 and ZeRO-2 by hand) measures next to the learner's code; the parent
side (checks.py, plan.py) compares.
"""
LAB = "lab3"
WORLD_SIZE = 2
WHERE = "labs/lab3_sharding"
BATCH, SEQ = 8, 64   # per rank
GLOBAL = 16          # sequences per step in the resume runs, at any world size
DROPOUT, RNG_SEED = 0.1, 4242  # the same-world-size resume trains with dropout, every rank its own stream
N_STEPS, SAVE_AT = 12, 5
RESHARD_STEPS = 2    # steps after resuming at another world size, compared between 1 rank and 4
