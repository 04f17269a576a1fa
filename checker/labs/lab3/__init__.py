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
SGD_TOL = 1e-6       # Zero2 / ShardedOptimizer + SGD vs DDP + SGD, weights: sums of N values in another order
FSDP_TOL = 1e-5      # FSDP2 (and DeepSpeed's stages) vs DDP, losses: reduce-scatter and all-reduce sum in other orders
TRAIN_WHY = ("The reference's uninterrupted FSDP2 run from the same weights and data: does your apply_fsdp shard or "
             "train otherwise there than in the correctness run?")
TRAIN_LOSS_RTOL = 1e-3  # the uninterrupted FSDP2 run's losses against the reference's own run of it (_crosscheck)
RESHARD_STEPS = 2    # steps after resuming at another world size, compared between 1 rank and 4
# The speed runs (tasks.task_speed): the learner's FSDP2 and ZeRO-2 in one run, torch DDP in another that never
# imports the learner's code, taking turns (checker/relay.py). Each round: a learner window, two of DDP's, a learner
# window (FSDP2 first, ZeRO-2 first in odd rounds); each learner window runs back to back with a DDP window of its own
# size. Sizes per strategy (sequences per rank per step, steps per window): FSDP2's price is per collective call, so
# its windows are small steps (one FSDP unit per layer shows there); ZeRO-2's and DDP's bytes are alike, so its windows
# are the lab's steps, where a loaded machine's delays on each call weigh less.
SPEED_ROUNDS = 10
SPEED_SIZES = {"fsdp": (2, 8), "zero2": (BATCH, 6)}


def speed_order(learner: str, ddp: str) -> list[str]:
    return [learner, ddp, ddp, learner] * SPEED_ROUNDS


def speed_slots(k: int) -> tuple[str, str]:
    """Round k's two sizes, in order (a strategy's name stands for its size)."""
    return ("fsdp", "zero2") if k % 2 == 0 else ("zero2", "fsdp")
