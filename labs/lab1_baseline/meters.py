# GENERATED from solutions/lab1_baseline/meters.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Meters: how fast (tokens/s over a timed window) and how big (model-state bytes)."""
from __future__ import annotations

import time

import torch

from labs.common import dist as cdist


class ThroughputMeter:
    """Tokens per second over a window that skips the first `warmup_steps` steps.

    Call `step(tokens)` right after each training step returns. The window opens when the
    `warmup_steps`-th call returns and closes at the latest call; `tokens_per_s` is the tokens
    of the steps inside the window divided by its length.

    Why warm-up: the first steps pay one-off costs (allocator growth, lazy init, autotuning)
    that say nothing about the steady state.
    Why synchronise: on a GPU a step returns once its kernels are *queued*; without waiting
    for the device the clock measures launch speed, not training speed.
    """

    def __init__(self, device: torch.device, warmup_steps: int = 2):
        if warmup_steps < 1:
            raise ValueError("warmup_steps must be >= 1: the window opens at the end of a step")
        self.device = device
        self.warmup_steps = warmup_steps
        self.steps = 0
        self.tokens = 0
        self.t_start = None
        self.t_last = None

    def step(self, tokens: int) -> None:
        raise NotImplementedError("TODO(lab1): The timed window opens when the warmup_steps-th call returns and ends "
                                  "at the latest call; it holds the tokens of every later call and none of the "
                                  "warm-up's, not even the call that opens it. Every timestamp is taken once the "
                                  "device has finished the step's queued work, else a GPU is timed at launch speed. "
                                  "warmup_steps = 3, 11 calls: 8 steps' tokens over the time from call 3 to call 11. "
                                  "(hints: checker hint lab1 meters.step)")

    @property
    def tokens_per_s(self) -> float:
        """nan until the window holds at least one step."""
        raise NotImplementedError("TODO(lab1): The tokens counted inside the window divided by the window's length in "
                                  "seconds. Not a number (nan) until the window holds a step, so a caller can tell 'no "
                                  "measurement yet' from a slow run. 8 steps of 1,024 tokens over 0.2 s: 40,960 "
                                  "tokens/s. (hints: checker hint lab1 meters.tokens_per_s)")


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Bytes of model state held by this process, counted from the tensors themselves.

    Returns {"params": ..., "grads": ..., "optimizer": ..., "total": ...}.
    For fp32 AdamW expect 4 + 4 + 8 = 16 bytes per parameter, plus 4 bytes per parameter
    *tensor* for AdamW's `step` counter. A tied weight is stored once and counts once.
    """
    raise NotImplementedError("TODO(lab1): This process's bytes, counted from the tensors (elements x bytes per "
                              "element): params, each stored tensor once (a tied weight counts once); grads, only "
                              "those that exist (0 once freed); optimizer, every tensor of its per-parameter state. "
                              "fp32 AdamW: 4 + 4 + 8 B/param, plus 4 B per parameter tensor for its step count; tiny: "
                              "16 x 120,576 + 4 x 28 = 1,929,328 B. (hints: checker hint lab1 "
                              "meters.model_state_bytes)")
    return {"params": params, "grads": grads, "optimizer": opt, "total": params + grads + opt}
