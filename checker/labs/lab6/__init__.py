"""Lab 6 checks: tensor parallelism (by hand and with DTensor) and pipeline schedules (by hand and with torch).

Three runs at world size 2 (ranks started by checker/spawn.py, the harness default):
  tp         the learner's parallelize / parallelize_dtensor on the tiny GPT vs the unsharded model, which
             every rank builds itself from the same seed; all-reduces counted by the checker's own recorder
             (installed before the learner's code is imported), bytes counted from the tensors;
  pp         the learner's split_stages + pipeline_step (GPipe, 1F1B) and torch_schedule (GPipe, 1F1B) vs
             the unsplit model on the same batch: per-micro-batch losses and every gradient; also split_stages of a
             4-layer GPT chained stage to stage, the order torch's schedule runs forwards and backwards in (hooks),
             and the blocking dist.send calls of pipeline_step (counted by the checker's wrapper);
  pp_timing  the learner's pipeline_step driving the checker's SleepStage (labs/instruments/stage_probe.py): a stage
             whose forward and backward are fixed sleeps and which records when each micro-batch ran. From
             those timestamps the checker computes the bubble and the live activations; it never asks the
             schedule. It runs alone, after the others, so the timestamps are not stretched by their CPU use.
             The stage also counts, at each forward, the micro-batches whose tensors something still references.
tp and pp keep every value they compare with the in-process truth; where a check passed, tp@ref and pp@ref, the same
tasks on the reference in runs that never import the learner's code, judge them again (checker/labs/_crosscheck.py),
after the other runs.

The worker side (tasks.py) runs them next to the learner's code; the parent side (checks.py, plan.py) starts them
and compares. What both sides read is here.
"""
LAB = "lab6"
WORLD_SIZE = 2
WHERE = "labs/lab6_model_parallel"
SEED = 11
N_MICRO = 4  # the PP run's micro-batches
TOL = 1e-5  # against the unsharded or unsplit GPT; fp32: splitting a matmul's sum in two changes rounding at ~1e-7
# Timing: 20 ms forward, 40 ms backward per micro-batch per stage (backward ~2x forward, as in a real model).
# Per-boundary send/recv of 2 x 32 floats costs ~0.2 ms on gloo: ~1% of a 60 ms micro-batch.
TIMING = dict(width=32, micro_batch=2, forward_s=0.020, backward_s=0.040, micro_batches=(4, 8), reps=3)
