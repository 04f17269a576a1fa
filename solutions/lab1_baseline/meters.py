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
        # BEGIN SOLUTION The timed window starts at the moment the warmup_steps-th call returns and ends at the moment
        #                the latest call returns; it counts the tokens of exactly the steps that ran inside it, no more,
        #                no fewer (each call reports the step that finished just before it). Every moment is read once
        #                the device has finished the work the step queued, else a GPU is timed at launch speed. Work one
        #                example before you write it: warmup_steps = 2, five calls of 512 tokens each, the 2nd returning
        #                at t = 1.0 s and the 5th at t = 1.3 s: how many tokens over how many seconds?
        # HINT 1         A meter lies by timing what is not steady training (a warm-up step's one-off costs; work still
        #                queued on the device) or by counting tokens that were not timed. Which call's timestamp opens
        #                the window, and whose tokens belong inside it: did the step the opening call reports run
        #                inside?
        # HINT 2         State on the meter: a call count, the window's start and latest time, a token sum. Before
        #                reading a monotonic clock (time.perf_counter) wait for the device:
        #                cdist.synchronize(self.device). The example: steps 3, 4 and 5 ran inside, 1,536 tokens over 0.3
        #                s, 5,120 tokens/s; the step the 2nd call reports ran before the window opened. With
        #                warmup_steps = 3 and 11 calls: 8 steps' tokens over the time from call 3 to call 11.
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
        # BEGIN SOLUTION The rate over the window: the tokens it counts over its length in seconds, the same however
        #                long after the last step it is read. Not a number (nan) until the window holds a step, so a
        #                caller can tell 'no measurement yet' from a slow run.
        # HINT 1         A rate is an amount over a duration, both taken over the same steps. What should it be before
        #                any step has been timed, and why is zero the wrong answer?
        # HINT 2         Read what step keeps: the token sum and the window's start and end times; the window is empty
        #                while its end is unset. The clock is not read here: the window ended at the last step.
        # HINT 3         if self.t_last is None: return float('nan'); return self.tokens / (self.t_last - self.t_start).
        if self.t_last is None:
            return float("nan")
        return self.tokens / (self.t_last - self.t_start)
        # END SOLUTION


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Bytes of model state held by this process, counted from the tensors themselves.

    Returns {"params": ..., "grads": ..., "optimizer": ..., "total": ...}, in bytes: the model's parameters, their
    gradients, the optimizer's state, and the three together. This lab's README works out what fp32 AdamW must give
    on `tiny`; the count must reach it from the tensors, never from that formula.
    """
    # BEGIN SOLUTION The bytes this process's model state occupies at the moment of the call, by kind and in total:
    #                for each kind (the model's parameters; their gradients; the optimizer's per-parameter state),
    #                what deleting that kind's tensors would free, read off the tensors that exist right then, never
    #                assumed from a formula. The checker compares after real steps of fp32 AdamW on tiny (the README's
    #                1,929,328 B), again once the gradients are freed, and on a bf16 copy of the model.
    # HINT 1         Count, don't compute: the formula is what your count is checked against. Which tensors exist right
    #                now, which one is reachable under two names, and what does the optimizer keep for each parameter?
    # HINT 2         Three sums of numel() * element_size(): over model.parameters() (it yields a shared tensor once),
    #                over each p.grad that is not None, and over every tensor value in optimizer.state (one dict per
    #                parameter; not every value is a tensor: AdamW's step count is a 4-byte tensor, counted); the
    #                total is their sum.
    # HINT 3         params = sum(p.numel() * p.element_size() for p in model.parameters()); grads: the same over p.grad
    #                where it is not None; opt: the same over v for state in optimizer.state.values() for v in
    #                state.values() if torch.is_tensor(v); return the dict with total = params + grads + opt.
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    opt = sum(v.numel() * v.element_size()
              for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))
    return {"params": params, "grads": grads, "optimizer": opt, "total": params + grads + opt}
    # END SOLUTION
