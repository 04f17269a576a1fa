"""Lab 10 checks: a mixture-of-experts layer, its capacity and balance, then its experts spread over ranks.

Three runs (ranks started by checker/spawn.py, the harness default):
  units  world size 1: route, keep_mask, capacity and load_balancing_loss against the checker's own reference
         (ref.py: routing by Python sorting and counters, the layer DENSE, every expert on every token mixed by a
         gate matrix), the learner's MoE layer with the reference's weights loaded (output, gradients, aux loss,
         counts, with tokens dropped), and balance: the learner's layer and update_bias repeated on a skewed router,
         tokens per expert measured by the checker.
  ep     N = 2 or 3 ranks (the hidden variant picks): expert_parallel on each rank's own tokens vs the reference on
         the same tokens, computed by every rank for every rank BEFORE the learner's code is imported; bytes of
         every collective from the checker's counter on torch.distributed (installed before that import too).
  full, resume_1, resume_2   2 ranks, ep 2: the tiny GPT with MoE blocks trained by AdamW and ep_dp_step; resume_1
         saves with save_checkpoint after a hidden step S, takes two more steps and is killed INSIDE its second save
         (the checker's torch.save writes half the file, then the kill); resume_2 builds its model from another
         seed, loads, and goes on; the checker fingerprints every rank's state (weights and buffers) after every step.
  epdp   4 ranks, dp 2 x ep 2: the tiny GPT with MoE blocks, one ep_dp_step vs one process's step on the four
         ranks' batches (each routed with its own capacity): loss, every gradient, every weight after the update,
         and every selection bias, which must move by the loads counted over all ranks.
The learner's code never reports a number the checker uses: outputs and gradients are compared by the checker,
tokens per expert are counted from the routing the checker sees, bytes beneath the learner's calls.
units, ep and epdp keep every value they compare with the reference (checker/labs/_crosscheck.py): where a check
they feed passed, each runs again on solutions/ ("units@ref", ...), after the other runs, in a process that never
imports the learner's code, which judges the learner's values against its own. The in-process truths are computed
before that import, but the comparisons, and ref.capacity, _plan_reference, are called after it, where learner code
could have replaced them.

The worker side (tasks.py, with ref.py and measure.py) runs and counts next to the learner's code; the parent side
(checks.py, plan.py) compares; shapes.py holds the runs' shapes both sides read.
"""
LAB = "lab10"
WHERE = "labs/lab10_moe"
TOL = 2e-5  # fp32, summed in another order than the reference's dense mix: measured <= 3e-7 here
AUX_RTOL = 1e-5  # the loss is a sum of E products of means: fp32 rounding, relative
