# GENERATED from solutions/lab7_memory/fp8.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""FP8 training, emulated: the scaling arithmetic of float8 matmuls, on any CPU.

    python -m labs.lab7_memory.fp8       # a linear layer in emulated fp8: error vs fp32, scales over steps

fp8 has 8 bits: e4m3 (4 exponent bits, 3 mantissa; largest 448, steps of 1/8 relative) for weights and
activations, e5m2 (5 and 2; largest 57,344, steps of 1/4) for gradients, whose range spans more binades. So few
bits only work scaled: a tensor is multiplied by a scale s that puts its largest magnitude (amax) near the top of
the format, cast (round to nearest, saturated at the largest finite value: never inf or NaN from range alone),
and the matmul's result divided by the scales again. An H100's fp8 matmul does exactly that in hardware
(2x bf16's FLOP/s); here the values are cast to torch's float8 dtypes and back, so the numbers are the
hardware's and the speed is not.

Which scale. *Current* scaling: s = fmax / amax(x) from the tensor itself, one extra pass over it before the cast.
*Delayed* scaling (Transformer Engine's default): s from the largest amax of the last H steps' tensors, so the
cast needs no pass of its own; the risk is a tensor whose amax jumps above the history's, which saturates: step
t's scale comes from the amaxes of steps t-H .. t-1, never from step t's own. A margin m divides s by 2^m.

Arithmetic: e4m3's 3 mantissa bits give a relative rounding error up to 2^-4 = 6.25% per element; a dot product of
K terms averages it down, so a matmul's output is off by ~2^-4 / sqrt(3) ≈ 3.6% of one term's size, not of the sum:
for K = 64 random terms the relative error of the result is a few per cent (measured by main()).
"""
from __future__ import annotations

import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def fp8_max(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)


def to_fp8(x: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """x * scale cast to the fp8 `dtype` (1 byte an element), saturated at +-fp8_max(dtype), never inf or NaN from
    range alone; from_fp8(to_fp8(x, s, d), s) approximates x."""
    raise NotImplementedError("TODO(lab7): A tensor of `dtype` whose values are x*scale rounded to the nearest "
                              "representable value, with every magnitude beyond the format's largest finite value set "
                              "to that value (sign kept). (hints: checker hint lab7 fp8.to_fp8)")


def from_fp8(q: torch.Tensor, scale: float) -> torch.Tensor:
    """The fp32 value an fp8 tensor stands for: q / scale."""
    return q.float() / scale


def current_scale(x: torch.Tensor, dtype: torch.dtype, margin: int = 0) -> float:
    """fmax / amax(x) / 2^margin: x's largest magnitude lands on the format's largest value. 1.0 for an all-zero x."""
    amax = x.detach().abs().max().item()
    return fp8_max(dtype) / amax / 2 ** margin if amax > 0 else 1.0


class DelayedScaler:
    """Delayed scaling with an amax history of `history` steps. Between calls, .amax_history holds the largest
    magnitudes of the last `history` tensors cast (newest first; zeros where there were fewer) and .scale is the
    scale the next cast will use; cast's contract says which."""

    def __init__(self, dtype: torch.dtype, history: int = 16, margin: int = 0):
        self.dtype, self.margin = dtype, margin
        self.amax_history = torch.zeros(history)
        self.scale = 1.0

    def cast(self, x: torch.Tensor) -> tuple[torch.Tensor, float]:
        """x in this scaler's fp8 dtype, saturated, and the scale s it was cast with: s known before x was seen."""
        raise NotImplementedError("TODO(lab7): Returns (q, s): s is the scale the earlier calls left, never one "
                                  "computed from x (delayed scaling: the cast needs no pass over x of its own), and q "
                                  "is x cast with it, saturated. Afterwards amax_history holds the largest magnitudes "
                                  "of the last H calls' tensors, this one's included, newest first, its length always "
                                  "H; and .scale is what the next call will use: fmax / the history's largest / "
                                  "2^margin, or 1.0 while the history holds only zeros. The checker compares every "
                                  "scale used, every cast's bytes and the final history with its own. (hints: checker "
                                  "hint lab7 fp8.cast)")


class _Fp8Matmul(torch.autograd.Function):
    """y = x @ w.T with x and w in e4m3 and the incoming gradient in e5m2, each through its own DelayedScaler."""

    @staticmethod
    def forward(ctx, x, w, sx, sw, sg):
        raise NotImplementedError("TODO(lab7): Returns y = x wᵀ as an fp8 matmul computes it: from x and w as e4m3 "
                                  "holds them after a delayed-scaled cast through their own scalers (sx for x, sw for "
                                  "w; each call advances that scaler's history by one), each divided by its scale "
                                  "again. And leaves on ctx what backward needs, at fp8's memory: the two fp8 tensors "
                                  "(1 byte an element, never the fp32 originals), the scales they were cast with, and "
                                  "the gradient's scaler sg. The checker compares y, and both gradients, with its own "
                                  "emulation's to 1e-6 over four steps. (hints: checker hint lab7 fp8.forward)")

    @staticmethod
    def backward(ctx, g):
        raise NotImplementedError("TODO(lab7): Returns the gradients of forward's inputs (x, w, then None for the "
                                  "three scalers), as an fp8 matmul's backward computes them: from operands as fp8 "
                                  "holds them, never the fp32 originals: x and w as forward cast them (what forward "
                                  "kept), and the incoming gradient as e5m2 holds it after a delayed-scaled cast "
                                  "through ctx.sg, whose history this call advances (gradients span more binades than "
                                  "they need digits: e5m2's range). The checker compares both gradients with its "
                                  "emulation's to 1e-6. (hints: checker hint lab7 fp8.backward)")


class Fp8Linear(torch.nn.Module):
    """A Linear (no bias) whose matmul runs in emulated fp8: x and the weight e4m3, the gradient e5m2, delayed
    scaling for all three. The master weight stays fp32 (the optimizer updates it); only the matmul's inputs are
    fp8."""

    def __init__(self, weight: torch.Tensor, history: int = 16, margin: int = 0):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().clone())
        self.sx, self.sw = DelayedScaler(E4M3, history, margin), DelayedScaler(E4M3, history, margin)
        self.sg = DelayedScaler(E5M2, history, margin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = _Fp8Matmul.apply(x.reshape(-1, shape[-1]), self.weight, self.sx, self.sw, self.sg)
        return y.view(*shape[:-1], -1)


def main() -> None:
    torch.manual_seed(0)
    w = torch.randn(64, 64) / 8
    layer = Fp8Linear(w)
    for step in range(6):
        x = torch.randn(32, 64, requires_grad=True) * (1 + step)  # amax grows: delayed scaling lags behind it
        used = layer.sx.scale
        y = layer(x)
        y.backward(torch.ones_like(y))
        exact = x.detach() @ w.t()
        err = ((y - exact).norm() / exact.norm()).item()
        top = (x.abs().max() * used).item()
        print(f"step {step}: amax(x) {x.abs().max().item():5.2f}, scale {used:6.2f} -> largest scaled value "
              f"{top:6.1f} of 448{' (saturated)' if top > 448 else ''}; relative error of y {err:.2%}")


if __name__ == "__main__":
    main()
