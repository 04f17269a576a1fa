"""Lab 1 checks: reproducibility, exact resume after a SIGKILL, learning, speed, meters, input pipeline.

The worker side (tasks.py, measure.py) measures next to the learner's code; the parent side (checks.py, plan.py)
compares. Every number in the report is computed by the checker, from tensors and clocks it reads itself: the
loss that counts is the checker's own validation loss, the bytes that count come from the formula, the speed from
the checker's timer.
"""
LAB = "lab1"
WORLD_SIZE = 1
WHERE = "labs/lab1_baseline"
