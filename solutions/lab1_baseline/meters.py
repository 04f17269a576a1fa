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
        # BEGIN SOLUTION synchronise the device, read time.perf_counter(); open the window at the warmup_steps-th call,
        #                after it count tokens and move the window's end
        cdist.synchronize(self.device)
        now = time.perf_counter()
        self.steps += 1
        if self.steps == self.warmup_steps:
            self.t_start = now
        elif self.steps > self.warmup_steps:
            self.tokens += tokens
            self.t_last = now
        # END SOLUTION

    @property
    def tokens_per_s(self) -> float:
        """nan until the window holds at least one step."""
        # BEGIN SOLUTION tokens counted inside the window / (window end - window start); nan before the window holds a
        #                step
        if self.t_last is None:
            return float("nan")
        return self.tokens / (self.t_last - self.t_start)
        # END SOLUTION


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Bytes of model state held by this process, counted from the tensors themselves.

    Returns {"params": ..., "grads": ..., "optimizer": ..., "total": ...}.
    For fp32 AdamW expect 4 + 4 + 8 = 16 bytes per parameter, plus 4 bytes per parameter
    *tensor* for AdamW's `step` counter. A tied weight is stored once and counts once.
    """
    # BEGIN SOLUTION sum numel()*element_size() over model.parameters() (unique), over each p.grad that exists, and over
    #                every tensor in optimizer.state
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    opt = sum(v.numel() * v.element_size()
              for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))
    # END SOLUTION
    return {"params": params, "grads": grads, "optimizer": opt, "total": params + grads + opt}
