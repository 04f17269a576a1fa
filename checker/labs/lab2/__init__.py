"""Lab 2 checks: sharding, DDP == one process on the global batch, sync, no_sync, overlap, speed, resume.

Every multi-rank run is checker.worker on 2 ranks (3 in odd hidden variants), started as torchrun would
(checker/spawn.py). The checker drives the learner's wrappers with its own loop and data, compares against a
single-process model it trains itself on rank 0, and counts all-reduces with its own recorder.

The worker side (tasks.py) runs next to the learner's code; the parent side (checks.py, plan.py) starts the runs and
compares. What both sides read is here: the batch, the resume runs' length, the differential step's plan and the
throughput runs' turns.
"""
LAB = "lab2"
WORLD_SIZE = 2
WHERE = "labs/lab2_ddp"
N_STEPS, SAVE_AT = 16, 6
STEP_PLAN = [(3, 1.0), (1, 1.0), (3, 5.0), (2, 1.0)]  # (micro-batches, logit scale: x5 forces the clip)
BATCH, SEQ = 8, 64          # per rank
TOL = 1e-5  # max abs difference of gradients and weights from one process on the global batch (fp32)
TRAIN_WHY = ("The reference's uninterrupted run from the same seeds and data: do your train_step, BucketedDDP or "
             "ShardedSampler train otherwise there than in the runs compared step by step (the differential step, "
             "the timed windows)?")
TRAIN_LOSS_RTOL = 1e-3  # the uninterrupted run's losses, rank by rank, against the reference's own run of it
#                         (checker/labs/_crosscheck.py): 0.0 for the reference; slack for other reduction orders

# The speed ratio: the learner's BucketedDDP and torch's DDP, each in a 2-rank run of its own, take THROUGHPUT_WINDOWS
# windows of THROUGHPUT_STEPS steps each (~0.2 s a window on tiny, 2 ranks on 2 idle cores) in turn, A B B A ...
# (each pair back to back, so a change of load hits both alike), timed by the checker (checker/relay.py); then the
# learner's run takes one more, its NaiveDDP's, for the record (~4x slower, not graded).
THROUGHPUT_WINDOWS, THROUGHPUT_STEPS = 16, 8


def throughput_order(learner: str, torch_ddp: str) -> list[str]:
    pairs = [w for k in range(THROUGHPUT_WINDOWS)
             for w in ((learner, torch_ddp) if k % 2 == 0 else (torch_ddp, learner))]
    return pairs + [learner]  # the last: NaiveDDP's window
