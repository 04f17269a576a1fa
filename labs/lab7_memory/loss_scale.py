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
        raise NotImplementedError("TODO(lab7): Returns whether the optimizer stepped. Afterwards every gradient holds "
                                  "its value divided by S, the gradient of the unscaled loss (exact for a power-of-two "
                                  "S), and either all were finite and the optimizer took its step on them, or some "
                                  "gradient of some parameter held an inf or a NaN (an fp16 overflow shows as either: "
                                  "inf - inf and 0 x inf are NaN) and the weights and the optimizer's moments are bit "
                                  "for bit as before, a NaN never reaching them; the scaler remembers which, for "
                                  "update. The checker injects an inf in one step and a NaN in another. (hints: "
                                  "checker hint lab7 loss_scale.step)")

    def update(self) -> None:
        """After step(): back off on an overflow, grow after growth_interval clean steps."""
        raise NotImplementedError("TODO(lab7): The scale each step uses is a function of the steps before it: the step "
                                  "after an overflowed one uses S x backoff_factor (0.5); a step preceded by "
                                  "growth_interval clean steps in a row, counted since the last overflow or the last "
                                  "growth, uses S x growth_factor (2); any other step uses the S of the one before. So "
                                  "with growth_interval G, G - 1 clean steps, an overflow, then clean steps use S (G "
                                  "times, the overflow's step included), S/2 (G times), S (G times), then 2S. Why: S "
                                  "falls fast to where gradients fit fp16 (max 65,504) and creeps back up so small "
                                  "ones stay above 6e-8. (hints: checker hint lab7 loss_scale.update)")
