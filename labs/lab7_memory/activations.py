# GENERATED from solutions/lab7_memory/activations.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""How many bytes one transformer block keeps for its backward: the estimator, derived for labs/common/model.py.

Autograd keeps, from forward to backward, every tensor an op needs to compute its input's gradient. For
this model's pre-LN block (b = batch, s = sequence, h = n_embd, a = heads), on the CPU in training mode,
activation_terms names each kept tensor (or group) and its bytes; activation_bytes sums them. The sum must
equal what the checker measures one block keeping, to the byte, for fp32 and bf16 autocast, dropout on and
off, and no, selective or full recomputation (recompute.py). The README gives the method and one worked term;
measure.saved_bytes lists what one block really keeps (shape, dtype, bytes) to check a term at a time.

The anchor is Megatron-LM's published count (Korthikanti et al., 2022) for 16-bit activations, 1-byte
dropout masks and GPU kernels: s*b*h*(34 + 5*a*s/h) bytes per layer (megatron_bytes). Reconcile your terms
with it once they match the measurement: this model on the CPU differs in the masks' dtype, LayerNorm's
statistics and the attention kernel's tensors.
"""
from __future__ import annotations

FP32 = 4  # bytes: the residual stream, LayerNorm statistics, the CPU math attention (also under autocast)


def activation_terms(cfg, batch: int, seq: int, precision: str = "fp32", recompute: str = "none") -> dict[str, int]:
    """{what keeps it: bytes} for one Block's backward (CPU kernels); the values sum to activation_bytes."""
    b, s, h, a = batch, seq, cfg.n_embd, cfg.n_head
    bsh, bs = b * s * h, b * s
    raise NotImplementedError("TODO(lab7): {what keeps it: bytes} for one Block, summing to the bytes the checker "
                              "measures it keeping from forward to backward, to the byte, at any b, s, h, a; fp32 or "
                              "bf16, recompute none, selective or full, dropout on or off. Per op: what its backward "
                              "needs x its width x bytes per element (4 in fp32; 2 for a matmul's inputs and outputs "
                              "under bf16); a storage two tensors view counts once. (hints: checker hint lab7 "
                              "activations.activation_terms)")


def activation_bytes(cfg, batch: int, seq: int, precision: str = "fp32", recompute: str = "none") -> int:
    """Bytes one Block of `cfg` keeps from forward to backward, on the CPU in training mode.

    precision: "fp32", or "bf16" (autocast, fp32 weights); recompute: "none", "selective" or "full"."""
    if precision not in ("fp32", "bf16") or recompute not in ("none", "selective", "full"):
        raise ValueError(f"precision fp32|bf16, recompute none|selective|full; got {precision!r}, {recompute!r}")
    return sum(activation_terms(cfg, batch, seq, precision, recompute).values())


def megatron_bytes(batch: int, seq: int, hidden: int, heads: int) -> int:
    """The published per-layer count for 16-bit activations with 1-byte dropout masks: s*b*h*(34 + 5*a*s/h)."""
    return seq * batch * hidden * 34 + 5 * heads * seq * seq * batch
