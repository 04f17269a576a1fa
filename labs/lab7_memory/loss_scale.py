# GENERATED from solutions/lab7_memory/loss_scale.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Dynamic loss scaling for fp16, by hand: what torch.amp.GradScaler does, with the same methods.

fp16 gradients below 6e-5 (subnormal) or 6e-8 (zero) lose their digits. Multiplying the loss by S = 2^16
shifts every gradient up 16 binades, into range. Too large an S and a gradient overflows fp16's 65,504
to inf (and an inf meeting another, or a zero, makes NaN). So S must be dynamic, and two things must hold:
  - step(): the optimizer only ever steps on the gradients of the loss itself, not of S x loss, and a step whose
    gradients overflowed reaches neither the weights nor the optimizer's moments;
  - update(): S comes down at once when it proved too large and goes back up when it has been safe for a while,
    by the factors given (update's contract says exactly when).
A power-of-two S changes only exponents, so scaling by it and back is exact.
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
        """Whether the optimizer stepped: on the gradients of the unscaled loss, and only if none overflowed."""
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
                                  "after an overflowed one uses that step's S x backoff_factor (0.5); a step that "
                                  "follows growth_interval clean steps in a row, counted since the last overflow or "
                                  "the last growth, whichever came later, uses S x growth_factor (2); any other step "
                                  "uses the S of the one before. Why: S falls fast to where gradients fit fp16 (max "
                                  "65,504) and creeps back up so small ones stay above 6e-8. The checker drives a "
                                  "scaler through clean steps, an overflow and more clean steps, and reads every "
                                  "scale. (hints: checker hint lab7 loss_scale.update)")
