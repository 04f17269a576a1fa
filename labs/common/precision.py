"""One switch for numeric precision: `--precision fp32|bf16` in every lab script, the checker, FSDP2, DeepSpeed.

    with precision.autocast(env.device, "bf16"):
        loss = train_step(model, optimizer, scheduler, batch)

bf16 here is *mixed* precision: the weights, gradients and AdamW moments stay fp32 (the master copy, 16
bytes/parameter as before); autocast runs matmuls and attention in bf16 and keeps reductions (softmax,
LayerNorm, the loss) in fp32. bf16 has fp32's 8-bit exponent, so gradients neither underflow nor need
fp16's loss scaling; its 8-bit mantissa (relative rounding 2^-8 = 0.4%) is why the master weights stay fp32:
an update of lr * grad ~ 1e-3 of a weight would round away in bf16 almost every step.
Why it pays on a GPU: tensor cores do bf16 at 989 TFLOP/s on an H100 SXM vs 67 TFLOP/s for plain fp32
(labs/common/metrics.py's table), and activations saved for backward take half the bytes.
bf16 autocast also runs on CPU (slower there than fp32 on most CPUs, but the same code path), so CI tests it.

Sharded engines take the same switch: FSDP2 by a MixedPrecisionPolicy (params gathered in bf16, gradients
reduce-scattered in fp32), DeepSpeed by its "bf16" config section.
"""
from __future__ import annotations

import contextlib
import os

import torch

PRECISIONS = ("fp32", "bf16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def check(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def current(default: str = "fp32") -> str:
    """The precision the checker asked for (COURSE_PRECISION, set by `checker grade --precision`)."""
    return check(os.environ.get("COURSE_PRECISION") or default)


def autocast(device: torch.device, precision: str):
    """The forward (and the backward it records) in `precision`; fp32: no autocast at all."""
    if check(precision) == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


def peak_key(precision: str, device: torch.device | None = None) -> str:
    """Which datasheet peak a run in `precision` can reach: "bf16" for bf16 autocast; for fp32, "tf32" when
    torch lets fp32 matmuls use TF32 tensor cores (torch.set_float32_matmul_precision("high")), else "fp32"
    (plain FP32 units, torch's default)."""
    if check(precision) == "bf16":
        return "bf16"
    if (device is not None and getattr(device, "type", device) == "cuda"
            and torch.get_float32_matmul_precision() != "highest"):
        return "tf32"
    return "fp32"


def fsdp_kwargs(precision: str) -> dict:
    """Keyword arguments for lab 3's apply_fsdp(model, mixed_precision=...)."""
    return {"mixed_precision": check(precision) == "bf16"}


def fsdp_policy(precision: str):
    """FSDP2's MixedPrecisionPolicy for `precision` (None for fp32): compute in bf16, reduce in fp32, because a
    sum of N bf16 gradients loses log2(N) more mantissa bits than the model can spare."""
    if check(precision) == "fp32":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=DTYPES[precision], reduce_dtype=torch.float32)


def deepspeed_config(config: dict, precision: str) -> dict:
    """A copy of a DeepSpeed config with its bf16 section following `precision` (fp16 stays off: bf16
    needs no loss scaling). DeepSpeed then keeps fp32 master weights in its optimizer, as autocast does."""
    out = dict(config)
    out["bf16"] = {"enabled": check(precision) == "bf16"}
    out["fp16"] = {"enabled": False}
    return out


def add_argument(parser) -> None:
    """`--precision fp32|bf16` on a lab script's argparse parser."""
    parser.add_argument("--precision", choices=PRECISIONS, default=current(),
                        help="bf16: autocast with fp32 master weights; MFU against the bf16 peak")
