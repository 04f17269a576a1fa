# GENERATED from solutions/lab7_memory/activations.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""How many bytes one transformer block keeps for its backward: the estimator, derived for labs/common/model.py.

Autograd keeps, from forward to backward, every tensor an op needs to compute its input's gradient. For
this model's pre-LN block (b = batch, s = sequence, h = n_embd, a = heads), op by op, on the CPU in fp32
with dropout on (F = the bytes of one activation element: 4 in fp32):

    LayerNorm 1     its input x (the block input)                  F * bsh   + mean, rstd 2 * 4 * bs
    qkv Linear      its input ln1(x)                               F * bsh
    attention       CPU with dropout runs the *math* kernel: q, k, v copies, softmax(QK^T), the
                    dropout mask, the dropped probabilities   3 * 4 * bsh + 3 * 4 * abs^2
    proj Linear     its input y                                    F * bsh
    resid dropout   its mask (on the CPU a float, in the tensor's dtype)  F * bsh
    LayerNorm 2     its input (the residual stream: fp32)          4 * bsh   + mean, rstd 2 * 4 * bs
    fc Linear       its input ln2(x)                               F * bsh
    GELU            its input (4h wide)                            4F * bsh
    proj Linear     its input gelu(.) (4h wide)                    4F * bsh
    MLP dropout     its mask                                       F * bsh
fp32 in all: 72 bsh + 12 abs^2 + 16 bs. The tiny GPT (h = 64, a = 4) at b = 2, s = 64: 985,088 B per block.

The anchor is Megatron-LM's count (Korthikanti et al., 2022) for 16-bit activations and 1-byte masks:
s*b*h*(34 + 5*a*s/h) = 34 bsh + 5 abs^2. Same op list: 16 activations of width h (x2 bytes = 32) + 2 masks
(x1 = 2) = 34, and softmax out (2) + mask (1) + dropped (2) = 5 per a*s^2. This model differs in three places:
  - attention keeps q, k AND v as fresh copies (3 bsh, Megatron counts QK^T's inputs 2 bsh + V 1 bsh: the same);
  - on the CPU, dropout's mask is a float in the tensor's dtype (CUDA's fused dropout keeps 1-byte bools);
  - LayerNorm keeps its mean and 1/std (fp32, 2 per token each): the 16 bs Megatron leaves out.
With dropout off the CPU runs the *flash* kernel instead: it keeps q, k, v (as the one qkv output they
view: 3F bsh), the output and a logsumexp per row (4 * abs); no s^2 term at all, and no masks: 64 bsh.

bf16 autocast (fp32 master weights; the residual stream stays fp32): Linear inputs, GELU's input and output
and the masks after a Linear become 2 bytes; LayerNorm runs in fp32; on the CPU attention runs in fp32.
And autocast keeps each Linear's bf16 *weight copy* for backward: 2 * 12 h^2 bytes per block, whatever b, s.
Per block: 46 bsh + 12 abs^2 + 16 bs + 24 h^2.

Recomputation (recompute.py) keeps less:
  full       only the block input (checkpoint holds it to rerun the forward): 4 bsh
  selective  the block input + every Linear's output (qkv 3h, attn proj h, fc 4h, mlp proj h: 9 bsh in
             the matmul dtype); LayerNorms, attention, GELU and dropout are rerun in backward.
"""
from __future__ import annotations

FP32 = 4  # bytes: the residual stream, LayerNorm statistics, CPU attention (also under autocast)


def activation_terms(cfg, batch: int, seq: int, precision: str = "fp32", recompute: str = "none") -> dict[str, int]:
    """Bytes one Block keeps for backward, by what keeps them (see the module docstring); CPU kernels."""
    b, s, h, a = batch, seq, cfg.n_embd, cfg.n_head
    bsh, bs = b * s * h, b * s
    raise NotImplementedError("TODO(lab7): the terms of the derivation above, as {name: bytes}")


def activation_bytes(cfg, batch: int, seq: int, precision: str = "fp32", recompute: str = "none") -> int:
    """Bytes one Block of `cfg` keeps from forward to backward, on the CPU in training mode.

    precision: "fp32", or "bf16" (autocast, fp32 weights); recompute: "none", "selective" or "full"."""
    if precision not in ("fp32", "bf16") or recompute not in ("none", "selective", "full"):
        raise ValueError(f"precision fp32|bf16, recompute none|selective|full; got {precision!r}, {recompute!r}")
    return sum(activation_terms(cfg, batch, seq, precision, recompute).values())


def megatron_bytes(batch: int, seq: int, hidden: int, heads: int) -> int:
    """The published per-layer count for 16-bit activations with 1-byte dropout masks: s*b*h*(34 + 5*a*s/h)."""
    return seq * batch * hidden * 34 + 5 * heads * seq * seq * batch
