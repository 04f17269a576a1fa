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
        """Record one training step that has just returned, of `tokens` tokens."""
        raise NotImplementedError("TODO(lab1): The timed window starts at the moment the warmup_steps-th call returns "
                                  "and ends at the moment the latest call returns; it counts the tokens of exactly the "
                                  "steps that ran inside it, no more, no fewer (each call reports the step that "
                                  "finished just before it). Every moment is read once the device has finished the "
                                  "work the step queued, else a GPU is timed at launch speed. Work one example before "
                                  "you write it: warmup_steps = 2, five calls of 512 tokens each, the 2nd returning at "
                                  "t = 1.0 s and the 5th at t = 1.3 s: how many tokens over how many seconds? (hints: "
                                  "checker hint lab1 meters.step)")

    @property
    def tokens_per_s(self) -> float:
        """nan until the window holds at least one step."""
        raise NotImplementedError("TODO(lab1): The rate over the window: the tokens it counts over its length in "
                                  "seconds, the same however long after the last step it is read. Not a number (nan) "
                                  "until the window holds a step, so a caller can tell 'no measurement yet' from a "
                                  "slow run. (hints: checker hint lab1 meters.tokens_per_s)")


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Bytes of model state held by this process, counted from the tensors themselves.

    Returns {"params": ..., "grads": ..., "optimizer": ..., "total": ...}, in bytes: the model's parameters, their
    gradients, the optimizer's state, and the three together. This lab's README works out what fp32 AdamW must give
    on `tiny`; the count must reach it from the tensors, never from that formula.
    """
    raise NotImplementedError("TODO(lab1): The bytes this process's model state occupies at the moment of the call, by "
                              "kind and in total: for each kind (the model's parameters; their gradients; the "
                              "optimizer's per-parameter state), what deleting that kind's tensors would free, read "
                              "off the tensors that exist right then, never assumed from a formula. The checker "
                              "compares after real steps of fp32 AdamW on tiny (the README's 1,929,328 B), again once "
                              "the gradients are freed, and on a bf16 copy of the model. (hints: checker hint lab1 "
                              "meters.model_state_bytes)")
