# GENERATED from solutions/lab7_memory/amp.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Mixed precision: compute in 16 bits, keep the weights (the "masters") and their update in fp32.

bf16 has fp32's 8 exponent bits and 8 of its 24 mantissa bits (eps 2^-8 = 0.4%). Run the matmuls in bf16
and their inputs/outputs kept for backward take 2 bytes instead of 4 (activations.py: fp32 72 bsh -> bf16
46 bsh per block); on a GPU the matmuls also run 2-16x faster. But an Adam update is ~lr = 1e-3 of a weight,
below bf16's 0.4% resolution: stored in bf16, many updates would round away to nothing. So the parameters stay
fp32, autocast casts a bf16 copy of each weight for the matmul, and the gradient flows back to the fp32
parameter. Memory for model state is unchanged (4 + 4 + 8 bytes/param with AdamW); activations shrink.

fp16 has 5 exponent bits: its smallest normal number is 6e-5, and small gradients underflow to zero. Loss
scaling (loss_scale.py) multiplies the loss by S before backward, so every gradient is S times larger, and
divides them by S before the step.
"""
from __future__ import annotations

import contextlib

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device_type: str, precision: str = "bf16"):
    """The context to run forward (and the loss) in: autocast to `precision` on `device_type`, or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    raise NotImplementedError("TODO(lab7): torch.autocast on this device type, in DTYPES[precision]")


def train_step(model, optimizer, batch, precision: str = "fp32", scaler=None) -> float:
    """One step on (x, y): forward and loss under autocast(precision), backward, optimizer step.

    With a scaler (fp16): backward the scaled loss; scaler.step(optimizer) skips the step if a gradient
    overflowed; scaler.update() adjusts the scale. The parameters stay fp32 throughout."""
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    raise NotImplementedError("TODO(lab7): forward under autocast(x.device.type, precision); backward (scaled with a "
                              "scaler); step")
