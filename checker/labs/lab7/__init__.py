"""Lab 7 checks: activation memory predicted then measured, recomputation, mixed precision, fp8, a memory plan, the
fast path's predicted speedups.

World size 1; the worker side's runs (tasks.py; the fast path's in fast_tasks.py):
  memory  the learner's activation_bytes at hidden shapes, with no recomputation and under the checker's own
          full and selective checkpointing; apply_recompute's and autocast's saved bytes; equal
          losses and gradients with recomputation (dropout on). Bytes are the checker's own: a dispatch mode sees
          every tensor the blocks create, and after forward the storages still alive (parameters and the output
          aside) are what the graph keeps for backward. That counts what torch.utils.checkpoint keeps too, which
          saved_tensors_hooks cannot see (checkpoint's own hooks take those tensors).
  amp     the learner's train_step in bf16 vs the checker's own fp32 loop (losses) and bf16 step (step 1's
          gradients); fp16 with the learner's LossScaler and an overflow the checker injects (a gradient hook writes
          inf); the scale used is read from the gradient that reaches the loss (d(S*loss)/d loss = S), not asked of
          the scaler; and a LossScaler with a small growth_interval, driven by the checker on one parameter.
  timing, timing_ref  steps with apply_recompute(model, "full") (the learner's run) and without it (a run of the
          reference's, which never imports the learner's package), each in a process of its own, taking their timed
          windows in turn (checker/relay.py); the parent reads each window's CPU time from the kernel. Alone.
  fp8     the learner's to_fp8, DelayedScaler and Fp8Linear against the checker's own emulation (casts to torch's
          float8 dtypes, computed before the learner's code is imported): the bytes of every cast, every scale used,
          every history, and the outputs and gradients of a few steps of a linear layer.
  memory@ref, amp@ref, fp8@ref  the same three tasks on the reference, in runs that never import the learner's
          package, after every other run and only where a check they feed passed: each judges every value the
          learner's run compared with the checker's truth against its own at that point (checker/labs/_crosscheck.py).
  fast_measure, fast_predict  the fast path (fast.py): the checker's own profile and measurements, in a run that never
          imports the learner's code, then the learner's predict_speedup on those profiles and made-up ones.
The parent side: checks.py (each check on its evaluator; fast_path's in fast.py, with the runs it starts), plan.py.
The runs' shapes, which both sides read, are in setup.py.
"""
LAB = "lab7"
WORLD_SIZE = 1
WHERE = "labs/lab7_memory"
# The checks' tolerances against the checker's truth in the learner's run. Each run that compares keeps the learner's
# values, and the reference's run of its own allows twice the tolerance (both within it of the same truth):
# checker/labs/_crosscheck.py.
EQUIV_TOL = 1e-6   # recomputation reruns the same ops on the same inputs: measured 0.0 here
AMP_TOL = 0.01     # bf16 vs fp32 loss, relative, every step of 8 (measured max 5e-5 to 3e-4 here; bf16 eps 2^-8 = 0.4%)
# The gradient norm the optimizer is handed / the checker's fp32 one at the same weights and masks: fp16's forward
# moves it by ~1e-3; a scale never divided out moves it by the scale (2^16 at the start). Kept as
# log2 of the norm, within 2 x log2(2) = 2 of the reference's: a factor of 4 either way.
GRAD_BAND = (0.5, 2.0)
LOSS_BAND = (0.9, 1.1)  # the loss fp16's train_step returns / the checker's fp32 loss at the same weights and masks
# amp_equivalence: step 1's gradients vs the checker's bf16 recipe on the same weights, batch and masks, relative to
# the largest gradient. The same ops give the same bits on the CPU (measured 0.0); backward inside the region
# autocasts its ops again (measured 2e-3 of the largest gradient: 2.4e-4 of 0.11).
GRAD_TOL = 1e-5
FP8_TOL = 1e-6     # fp8's scales and the linear layer's outputs and gradients vs the emulation, relative
