# GENERATED from solutions/lab7_memory/loss_scale.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
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
        raise NotImplementedError("TODO(lab7): Afterwards every gradient is divided by the scale S: the optimizer sees "
                                  "true gradients (exact for a power-of-two S). If any unscaled gradient holds an inf "
                                  "or NaN the update is skipped: weights and optimizer moments stay exactly as they "
                                  "were, and the overflow is remembered for the scale update. Returns whether the "
                                  "optimizer stepped. (hints: checker hint lab7 loss_scale.step)")

    def update(self) -> None:
        """After step(): back off on an overflow, grow after growth_interval clean steps."""
        raise NotImplementedError("TODO(lab7): After a step that overflowed, the next step's scale is S x "
                                  "backoff_factor (0.5: halved) and the count of clean steps restarts at 0; after "
                                  "growth_interval clean steps in a row, S x growth_factor (2: doubled) and the count "
                                  "restarts; otherwise S stays. S falls fast to where gradients fit fp16 (max 65,504) "
                                  "and creeps back up so small ones stay above 6e-8. (hints: checker hint lab7 "
                                  "loss_scale.update)")
