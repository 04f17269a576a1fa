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
    # BEGIN SOLUTION {what keeps it: bytes} for one Block, summing to the bytes the checker measures it keeping from
    #                forward to backward, to the byte, at any b, s, h, a; fp32 or bf16, recompute none, selective or
    #                full, dropout on or off. Per op: what its backward needs x its width x bytes per element (4 in
    #                fp32; 2 for a matmul's inputs and outputs under bf16); a storage two tensors view counts once.
    # HINT 1         Autograd keeps, per op, exactly what that op's gradient formula needs: its input, its output, a
    #                mask, statistics. Walk the pre-LN block op by op and ask: what does this op keep, how wide is it
    #                (h, 3h, 4h, or a*s*s per batch element), in which dtype, and is it a view of something already
    #                counted? Worked term: LayerNorm 1 keeps the fp32 block input, 4*b*s*h bytes.
    # HINT 2         A dict built term by term. Branch on recompute first (full: only the block input survives;
    #                selective: the input plus every Linear's output), then on dropout (the CPU's math attention
    #                keeps a*s*s tensors, its flash kernel none), then add what bf16 autocast keeps that fp32 does
    #                not. measure.py's saved_bytes on one block shows which term you missed.
    # HINT 3         f = 4 (fp32) or 2 (bf16). full: block input 4 bsh. selective: + 9 f bsh (qkv 3h, attn proj h,
    #                fc 4h, MLP proj h). none: block input 4 bsh; LayerNorm mean and rstd 2 x 2 x 4 bs; Linear inputs
    #                (qkv, attn proj, fc) 3 f bsh; LayerNorm 2 input (residual, fp32) 4 bsh; GELU input and output
    #                2 x 4 f bsh. Dropout on: q, k, v copies 3 x 4 bsh; softmax, mask, dropped 3 x 4 b*a*s*s; the two
    #                dropout masks after a Linear 2 f bsh. Dropout off: the qkv output q, k, v view, 3 f bsh, and a
    #                logsumexp per row, 4 b*a*s. bf16: each Linear's bf16 weight copy, 2 x 12 h^2.
    # The derivation, op by op, fp32, dropout on (F = bytes of one activation element: 4 in fp32):
    #     LayerNorm 1     its input x (the block input)                  F * bsh   + mean, rstd 2 * 4 * bs
    #     qkv Linear      its input ln1(x)                               F * bsh
    #     attention       CPU with dropout runs the *math* kernel: q, k, v copies, softmax(QK^T), the
    #                     dropout mask, the dropped probabilities   3 * 4 * bsh + 3 * 4 * abs^2
    #     proj Linear     its input y                                    F * bsh
    #     resid dropout   its mask (on the CPU a float, in the tensor's dtype)  F * bsh
    #     LayerNorm 2     its input (the residual stream: fp32)          4 * bsh   + mean, rstd 2 * 4 * bs
    #     fc Linear       its input ln2(x)                               F * bsh
    #     GELU            its input (4h wide)                            4F * bsh
    #     proj Linear     its input gelu(.) (4h wide)                    4F * bsh
    #     MLP dropout     its mask                                       F * bsh
    # fp32 in all: 72 bsh + 12 abs^2 + 16 bs. The tiny GPT (h = 64, a = 4) at b = 2, s = 64: 985,088 B per block.
    # Against Megatron's 34 bsh + 5 abs^2 (16-bit, 1-byte masks): 16 activations of width h (x2 bytes = 32) + 2
    # masks (x1 = 2) = 34, and softmax out (2) + mask (1) + dropped (2) = 5 per a*s^2. This model differs in three
    # places: attention keeps q, k AND v as fresh copies (3 bsh; Megatron counts QK^T's inputs 2 bsh + V 1 bsh: the
    # same); on the CPU dropout's mask is a float in the tensor's dtype (CUDA's fused dropout keeps 1-byte bools);
    # LayerNorm keeps its mean and 1/std (fp32, 2 per token each): the 16 bs Megatron leaves out.
    # Dropout off, the CPU runs the *flash* kernel: it keeps q, k, v (as the one qkv output they view: 3F bsh), the
    # output and a logsumexp per row (4 * abs); no s^2 term at all, and no masks: 64 bsh.
    # bf16 autocast (fp32 master weights; the residual stream stays fp32): Linear inputs, GELU's input and output
    # and the masks after a Linear become 2 bytes; LayerNorm runs in fp32; on the CPU the math attention (dropout on)
    # upcasts its inputs and runs in fp32, while the flash kernel (dropout off) runs in bf16, keeping the bf16 qkv
    # output and its bf16 output (its logsumexp stays fp32): 3f bsh + 4 abs, as in fp32 with f = 2. And
    # autocast keeps each Linear's bf16 weight copy for backward: 2 * 12 h^2 bytes per block, whatever b, s.
    # Per block: 46 bsh + 12 abs^2 + 16 bs + 24 h^2.
    # Recomputation: full keeps only the block input (checkpoint holds it to rerun the forward): 4 bsh; selective
    # keeps the block input + every Linear's output (qkv 3h, attn proj h, fc 4h, mlp proj h: 9 bsh in the matmul
    # dtype); LayerNorms, attention, GELU and dropout are rerun in backward.
    f = {"fp32": 4, "bf16": 2}[precision]  # a matmul's input/output under autocast
    if recompute == "full":
        return {"block input": FP32 * bsh}
    if recompute == "selective":
        return {"block input": FP32 * bsh, "Linear outputs (qkv, proj, fc, proj)": 9 * f * bsh}
    terms = {
        "block input (LayerNorm 1)": FP32 * bsh,
        "LayerNorm mean, rstd": 2 * 2 * FP32 * bs,
        "Linear inputs (qkv, attn proj, fc)": 3 * f * bsh,
        "LayerNorm 2 input (residual)": FP32 * bsh,
        "GELU input and output (4h)": 2 * 4 * f * bsh,
    }
    if cfg.dropout > 0:  # math attention: q, k, v copies and three a*s*s tensors; two masks after a Linear
        # v is a copy, unless the reshape to (b, a, s, d) can merge its dims (b == 1 or a == 1): then it is a
        # view of the qkv output, and a view keeps its whole base alive (3 bsh). bf16 upcasts: always copies.
        v_keeps = 3 * bsh if (b == 1 or a == 1) and precision == "fp32" else bsh
        terms["attention q, k, v"] = FP32 * (2 * bsh + v_keeps)
        terms["attention softmax, mask, dropped (a*s^2)"] = 3 * FP32 * b * a * s * s
        terms["dropout masks (attn, MLP)"] = 2 * f * bsh
    else:  # flash attention: the qkv output its q, k, v view, and one logsumexp per row
        terms["attention qkv (flash)"] = 3 * f * bsh
        terms["attention logsumexp"] = FP32 * b * a * s
    if precision == "bf16":
        terms["bf16 weight copies (12 h^2)"] = 2 * 12 * h * h
    return terms
    # END SOLUTION


def activation_bytes(cfg, batch: int, seq: int, precision: str = "fp32", recompute: str = "none") -> int:
    """Bytes one Block of `cfg` keeps from forward to backward, on the CPU in training mode.

    precision: "fp32", or "bf16" (autocast, fp32 weights); recompute: "none", "selective" or "full"."""
    if precision not in ("fp32", "bf16") or recompute not in ("none", "selective", "full"):
        raise ValueError(f"precision fp32|bf16, recompute none|selective|full; got {precision!r}, {recompute!r}")
    return sum(activation_terms(cfg, batch, seq, precision, recompute).values())


def megatron_bytes(batch: int, seq: int, hidden: int, heads: int) -> int:
    """The published per-layer count for 16-bit activations with 1-byte dropout masks: s*b*h*(34 + 5*a*s/h)."""
    return seq * batch * hidden * 34 + 5 * heads * seq * seq * batch
