# GENERATED from solutions/lab7_memory/amp.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Mixed precision: compute in 16 bits, keep the weights (the "masters") and their update in fp32.

bf16 has fp32's 8 exponent bits and 8 of its 24 mantissa bits (eps 2^-8 = 0.4%). Run the matmuls in bf16
and their inputs/outputs kept for backward take 2 bytes instead of 4 (activations.py counts what each block
keeps); on a GPU the matmuls also run 2-16x faster. But an Adam update is ~lr = 1e-3 of a weight,
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
    raise NotImplementedError("TODO(lab7): Inside the returned context, a Linear of the model, fed fp32 tensors living "
                              "on device type `device_type`, computes and returns the 16-bit type `precision` names, "
                              "and what it keeps for backward is 16-bit; the parameters themselves are untouched, "
                              "still fp32 (an update of 1e-3 of a weight is below bf16's 2^-8 resolution: stored in 16 "
                              "bits it would round away). Outside the context nothing has changed. The checker reads "
                              "the dtype the MLP's first Linear computes in and the bytes a block keeps inside your "
                              "context against its own. (hints: checker hint lab7 amp.autocast)")


def train_step(model, optimizer, batch, precision: str = "fp32", scaler=None) -> float:
    """One optimizer step on batch = (x, y) with forward and loss in `precision`; returns the loss as a float.

    scaler: None, or a loss scaler (loss_scale.py's, or torch.amp.GradScaler) for fp16, whose small gradients
    would underflow unscaled; an overflowed step must leave the parameters unchanged. The parameters, their
    gradients and the optimizer's state stay fp32 throughout."""
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    raise NotImplementedError("TODO(lab7): Returns the loss of batch as a Python float (the loss itself, never the "
                              "scaled one). Afterwards the parameters have taken one optimizer step on exactly the "
                              "gradients autograd gives when forward and the loss alone computed in `precision` "
                              "(backward follows the dtypes forward recorded; the checker compares step 1's gradients "
                              "with its own, bit for bit), and parameters, gradients and optimizer state are fp32 "
                              "throughout. With a scaler: the gradients the optimizer is handed are those of the "
                              "unscaled loss (fp16's small gradients survived backward because it ran on the loss x "
                              "S), a step whose gradients overflowed leaves the weights unchanged, and the next step's "
                              "scale reflects this one. (hints: checker hint lab7 amp.train_step)")
