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
        # BEGIN SOLUTION Returns whether the optimizer stepped. Afterwards every gradient holds its value divided by
        #                S, the gradient of the unscaled loss (exact for a power-of-two S), and either all were finite
        #                and the optimizer took its step on them, or some gradient of some parameter held an inf or a
        #                NaN (an fp16 overflow shows as either: inf - inf and 0 x inf are NaN) and the weights and the
        #                optimizer's moments are bit for bit as before, a NaN never reaching them; the scaler
        #                remembers which, for update. The checker injects an inf in one step and a NaN in another.
        # HINT 1         The loss was multiplied by S, so every gradient is S times too large, and an overflow in
        #                backward shows up as inf or NaN somewhere. Ask: which gradients must you look at to be sure
        #                none overflowed, and what must a bad step leave untouched so that a NaN never reaches the
        #                weights or the moments?
        # HINT 2         Every non-None gradient of the optimizer's param_groups; an in-place multiply by 1/S;
        #                torch.isfinite on each; the result kept in self._found_inf (update reads it).
        # HINT 3         inv = 1 / self._scale; grads = [p.grad for each group's params if p.grad is not None];
        #                grad.mul_(inv) for each; self._found_inf = any(not torch.isfinite(g).all() for g in grads);
        #                optimizer.step() only if not self._found_inf; return not self._found_inf.
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
        # BEGIN SOLUTION The scale each step uses is a function of the steps before it: the step after an overflowed
        #                one uses that step's S x backoff_factor (0.5); a step that follows growth_interval clean steps
        #                in a row, counted since the last overflow or the last growth, whichever came later, uses S x
        #                growth_factor (2); any other step uses the S of the one before. Why: S falls fast to where
        #                gradients fit fp16 (max 65,504) and creeps back up so small ones stay above 6e-8. The checker
        #                drives a scaler through clean steps, an overflow and more clean steps, and reads every scale.
        # HINT 1         The scale is a feedback loop: an overflow says S is too large now; a long run of clean steps
        #                says S could be larger. Ask: what must the scaler remember between steps to know when to grow,
        #                and when does that memory reset?
        # HINT 2         Read the flag step left in self._found_inf; count clean steps in self._clean_steps; multiply
        #                self._scale by backoff_factor or growth_factor. Check yourself with growth_interval G: after
        #                G - 1 clean steps, an overflow, then clean steps, the steps use S (G times, the overflow's step
        #                included), S/2 (G times), S (G times), then 2S.
        # HINT 3         If self._found_inf: self._scale *= self.backoff_factor; self._clean_steps = 0. Else:
        #                self._clean_steps += 1, and once it equals self.growth_interval: self._scale *=
        #                self.growth_factor; self._clean_steps = 0.
        if self._found_inf:
            self._scale *= self.backoff_factor
            self._clean_steps = 0
        else:
            self._clean_steps += 1
            if self._clean_steps == self.growth_interval:
                self._scale *= self.growth_factor
                self._clean_steps = 0
        # END SOLUTION
