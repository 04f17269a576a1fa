"""Lab 9 checks: FlashAttention by tiles, then attention across ranks (ring, zig-zag, Ulysses).

Three runs (ranks started by checker/spawn.py, the harness default):
  flash    world size 1: the learner's flash_attention vs torch's scaled_dot_product_attention (values and the
           gradients of a random upstream gradient), causal and not, at lengths no tile divides; the bytes its forward
           leaves for backward: storages its ops made (seen by a dispatch mode) that the autograd graph still holds.
  ring     N = 2 or 3 ranks (the hidden variant picks): ring_attention on contiguous and zig-zag shards (the learner's
           zigzag_shard) vs full attention, which every rank computes from the same seed BEFORE the learner's code is
           imported; bytes sent, from the checker's own counter on torch.distributed (installed before that import
           too); per-rank matmul FLOPs of forward, from a dispatch mode that sees every op the learner's code runs;
           when each receive was started and waited for, against when the tile matmuls ran (overlap).
  ulysses  N ranks: ulysses_attention vs full attention, its all-to-all bytes, and the error it must raise when the
           heads do not split over the ranks.
  cp       4 ranks, dp 2 x cp 2: the tiny GPT under apply_context_parallel, one cp_dp_step on zig-zag tokens, vs
           one process's step on the global batch, which every rank takes itself before the learner's code is
           imported: the loss, every gradient and every weight after the update.
  cp_full, cp_killed, cp_resumed   4 ranks each (resume.py): the same CP x DP job uninterrupted, killed inside the
           write of its second checkpoint, and resumed by fresh processes: the weights after every step, digested by
           the checker.
  flash@ref, ring@ref, ulysses@ref, cp@ref   the same tasks on the reference, after every other run and only where a
           check they feed passed, in runs that never import the learner's code: every value the four compare
           (outputs, gradients; the step's loss, gradients and weights) is judged again against the reference's own
           (checker/labs/_crosscheck.py). The four truths are computed before the learner's lab package is imported,
           but after the tree's labs/__init__.py, which Python runs at the import of labs.common, has run.
The learner's code never reports a number the checker uses: outputs and gradients are compared by the checker,
bytes and FLOPs are counted beneath the learner's calls.

The worker side (tasks.py, resume.py, measure.py) runs and counts next to the learner's code; the parent side
(checks.py, plan.py) compares, with the checker's byte formulas (formulas.py); shapes.py holds the runs' shapes both
sides read. report.py measures the notebook's and the bench's figures with the same instruments.
"""
LAB = "lab9"
WORLD_SIZE = 2
WHERE = "labs/lab9_long_context"
TOL = 2e-5  # fp32: a tiled softmax sums in another order than SDPA's kernel; measured <= 4e-6 here (3 ranks).
            # Against the reference's own run (tasks.py keep): 2 TOL, both within TOL of one deterministic truth
