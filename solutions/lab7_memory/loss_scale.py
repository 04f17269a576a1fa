"""Dynamic loss scaling for fp16, by hand: what torch.amp.GradScaler does, with the same methods.

fp16 gradients below 6e-5 (subnormal) or 6e-8 (zero) lose their digits. Multiplying the loss by S = 2^16
shifts every gradient up 16 binades, into range. Too large an S and a gradient overflows fp16's 65,504
to inf. So the scale is dynamic:
  - step():   unscale the gradients (divide by S, in fp32) and look for inf/NaN. If any: skip the update
              (the weights and the optimizer's moments stay as they were: a NaN must never reach them).
  - update(): after an overflow, S *= 0.5; after `growth_interval` clean steps in a row, S *= 2.
A power-of-two S changes only exponents, so scaling and unscaling are exact.
"""
from __future__ import annotations

import torch


class LossScaler:
    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        self._scale = float(init_scale)
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self._clean_steps = 0
        self._found_inf = False

    def get_scale(self) -> float:
        return self._scale

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale

    def step(self, optimizer) -> bool:
        """Unscale every gradient in place; step the optimizer only if all are finite. Returns whether it stepped."""
        # BEGIN SOLUTION divide each .grad by the scale; found_inf = any non-finite; optimizer.step() only if none
        inv = 1.0 / self._scale
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        for grad in grads:
            grad.mul_(inv)
        self._found_inf = any(not torch.isfinite(grad).all() for grad in grads)
        if not self._found_inf:
            optimizer.step()
        return not self._found_inf
        # END SOLUTION

    def update(self) -> None:
        """After step(): back off on an overflow, grow after growth_interval clean steps."""
        # BEGIN SOLUTION halve (backoff_factor) after an overflow and restart the count; grow after growth_interval
        if self._found_inf:
            self._scale *= self.backoff_factor
            self._clean_steps = 0
        else:
            self._clean_steps += 1
            if self._clean_steps == self.growth_interval:
                self._scale *= self.growth_factor
                self._clean_steps = 0
        # END SOLUTION
