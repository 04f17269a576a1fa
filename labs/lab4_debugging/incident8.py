# GENERATED from solutions/lab4_debugging/incident8.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Incident 8 — "On the new cluster the same job is 3x slower. The GPUs are the same model; nothing errors."

The job accumulates gradients over 4 micro-batches per optimizer step. Reproduce, diagnose (what
does the job measure before it trains?), fix `train_step` below:

    python -m labs.lab4_debugging.run 8
"""
from __future__ import annotations


def train_step(ddp, optimizer, micro_batches) -> float:
    """Zero the gradients, then forward and backward over this rank's micro-batches [(x, y), ...];
    afterwards .grad holds the global batch's mean gradient, averaged over ranks. Returns this rank's mean loss."""
    optimizer.zero_grad(set_to_none=True)
    k = len(micro_batches)
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        _, loss = ddp(x, y)
        (loss / k).backward()  # gradients accumulate in .grad over the micro-batches
        total += loss.item()
    return total / k
