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
        # BEGIN SOLUTION The timed window opens when the warmup_steps-th call returns and ends at the latest call; it
        #                holds the tokens of every later call and none of the warm-up's, not even the call that opens
        #                it. Every timestamp is taken once the device has finished the step's queued work, else a GPU is
        #                timed at launch speed. warmup_steps = 3, 11 calls: 8 steps' tokens over the time from call 3 to
        #                call 11.
        # HINT 1         A meter lies by timing what is not steady training (a warm-up step's one-off costs; work still
        #                queued on the device) or by counting tokens that were not timed. Which call's timestamp opens
        #                the window, and whose tokens belong inside it?
        # HINT 2         State on the meter: a call count, the window's start and latest time, a token sum. Before
        #                reading a monotonic clock (time.perf_counter) wait for the device:
        #                cdist.synchronize(self.device).
        # HINT 3         synchronise, now = time.perf_counter(); count the call; at the warmup_steps-th call set the
        #                start to now; on every later call add tokens and set the window's end to now.
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
        # BEGIN SOLUTION The tokens counted inside the window divided by the window's length in seconds. Not a number
        #                (nan) until the window holds a step, so a caller can tell 'no measurement yet' from a slow run.
        #                8 steps of 1,024 tokens over 0.2 s: 40,960 tokens/s.
        # HINT 1         A rate is an amount over a duration, both taken over the same steps. What should it be before
        #                any step has been timed, and why is zero the wrong answer?
        # HINT 2         Read what step keeps: the token sum and the window's start and end times; the window is empty
        #                while its end is unset.
        # HINT 3         if self.t_last is None: return float('nan'); return self.tokens / (self.t_last - self.t_start).
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
    # BEGIN SOLUTION This process's bytes, counted from the tensors (elements x bytes per element): params, each stored
    #                tensor once (a tied weight counts once); grads, only those that exist (0 once freed); optimizer,
    #                every tensor of its per-parameter state. fp32 AdamW: 4 + 4 + 8 B/param, plus 4 B per parameter
    #                tensor for its step count; tiny: 16 x 120,576 + 4 x 28 = 1,929,328 B.
    # HINT 1         Count, don't compute: the formula is what your count is checked against. Which tensors exist right
    #                now, which one is reachable under two names, and what does the optimizer keep for each parameter?
    # HINT 2         Three sums of numel() * element_size(): over model.parameters() (it yields a shared tensor once),
    #                over each p.grad that is not None, and over every tensor value in optimizer.state (one dict per
    #                parameter; not every value is a tensor).
    # HINT 3         params = sum(p.numel() * p.element_size() for p in model.parameters()); grads: the same over p.grad
    #                where it is not None; opt: the same over v for state in optimizer.state.values() for v in
    #                state.values() if torch.is_tensor(v).
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    opt = sum(v.numel() * v.element_size()
              for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))
    # END SOLUTION
    return {"params": params, "grads": grads, "optimizer": opt, "total": params + grads + opt}
