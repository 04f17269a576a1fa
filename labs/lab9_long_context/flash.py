# GENERATED from solutions/lab9_long_context/flash.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""FlashAttention-2 in plain PyTorch: attention by tiles, never holding the s x s score matrix.

    python -m labs.lab9_long_context.flash        # output and gradients vs scaled_dot_product_attention

Softmax needs a row's maximum and sum before any output, which is why naive attention materialises
S = q k^T / sqrt(d) (b*h*s*s floats) and keeps P = softmax(S) for backward: at s = 32k, h = 32 that is
128 GiB per sequence in fp32. The online softmax (Milakov & Gimelshein 2018; Dao 2023) walks the keys one
tile at a time instead, keeping per query row a few running numbers from which the exact softmax-weighted sum
is finished after the last tile. Which numbers, and what a tile that raises the row's largest score must do to
what was accumulated before it, is attend's to derive. What backward needs of the whole row is one number, its
log-sum-exp lse = log(sum over the row's keys of exp(score)): P = exp(S - lse) is recomputed tile by tile from
q, k and lse. So forward keeps q, k, v, o (the output, which the caller holds anyway) and lse: 4*b*h*s*d + b*h*s
floats instead of b*h*s*s.

Backward gets the gradient of o and must give those of q, k and v. Derive it for one row of P = softmax(S) first:
what does the softmax's Jacobian need to know of the whole row, and can the tensors you saved give it without P?
Then see that every term is a sum over tiles that needs only that tile's P, rebuilt from lse.

Causal: a query at position i sees keys at positions <= i. Positions are GLOBAL (a tensor per side), so the
same tile loop serves ring attention, where a rank's queries meet keys from elsewhere in the sequence, in any
order the layout gives. A tile in which no query sees any key is never computed (about half of them at
s >> tile: the FLOPs of causal attention are half of full attention's); in the others, a key after its query
is masked.
A query row that sees no key at all in this call (a whole block above the diagonal, in the ring) gets o = 0
and lse = -inf, so that merge gives it no weight.
"""
from __future__ import annotations

import math

import torch

BLOCK = 32  # tile edge for queries and keys: 32 x 32 fp32 scores = 4 KiB, well inside a CPU core's L1/L2


def attend(q, k, v, q_pos, k_pos, causal: bool, block_q: int = BLOCK, block_k: int = BLOCK):
    """(o, lse) of softmax(q k^T / sqrt(d)) v over these keys, by tiles. q (b, h, sq, d), k and v (b, h, sk, d),
    q_pos (sq,) and k_pos (sk,) global positions; lse (b, h, sq) fp32, -inf for a row that sees no key."""
    b, h, sq, d = q.shape
    sk = k.shape[2]
    raise NotImplementedError("TODO(lab9): Returns (o, lse): for every query row, o is the softmax-weighted sum of v "
                              "over the keys that row sees (scores q.k / √d) and lse the natural log of the sum of "
                              "e^score over those keys, both as if the row had been computed whole (the checker "
                              "compares with torch's attention to 2e-5, at lengths no tile divides); a row that sees "
                              "no key gets o = 0 and lse = -inf. Yet no more than block_q x block_k scores exist at "
                              "any time per batch and head: the s x s matrix never does, and a row's largest score is "
                              "known only once its last tile has been seen. Causal: a key at a later global position "
                              "than its query is invisible, and a tile in which no query sees any key is never "
                              "computed (the checker counts matmul FLOPs). (hints: checker hint lab9 flash.attend)")
    return o, lse


def attend_backward(q, k, v, o, lse, do, q_pos, k_pos, causal: bool, block_q: int = BLOCK, block_k: int = BLOCK):
    """(dq, dk, dv): the gradients of attention's loss through these keys only, recomputing each tile's
    probabilities from lse (the log-sum-exp of each query's WHOLE row: a partial one gives wrong gradients)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    sq, sk = q.shape[2], k.shape[2]
    raise NotImplementedError("TODO(lab9): dq, dk, dv are the exact gradients of the attention output's loss (upstream "
                              "gradient do) through these keys, equal to autograd through the naive formula; no tensor "
                              "larger than a block_q x block_k tile per (b, h) is created, and tiles entirely above "
                              "the diagonal are skipped. (hints: checker hint lab9 flash.attend_backward)")
    return dq, dk, dv


def merge(o1, lse1, o2, lse2):
    """(o, lse) of attention over the union of two disjoint key sets, from each set's (o, lse)."""
    raise NotImplementedError("TODO(lab9): o equals attention over both key sets at once and lse its log-sum-exp: each "
                              "partial output is a softmax normalised by its own sum, so it must be re-weighted by the "
                              "share of the total that its keys hold. A row with lse -inf on one side (no visible key) "
                              "takes the other side. (hints: checker hint lab9 flash.merge)")


class FlashAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(d)) v with O(s*d) memory kept for backward, which recomputes the rest."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k):
        pos_q = torch.arange(q.shape[2], device=q.device)
        pos_k = pos_q if k.shape[2] == q.shape[2] else torch.arange(k.shape[2], device=q.device)
        o, lse = attend(q, k, v, pos_q, pos_k, causal, block_q, block_k)
        raise NotImplementedError("TODO(lab9): Backward (yours too) can run from what is kept here alone, and what is "
                                  "kept grows as s*d, not s*s: the three inputs, the output and one fp32 number per "
                                  "query row (4*b*h*s*d + b*h*s floats), held where autograd can free them with the "
                                  "graph; nothing of size s*s survives forward (the checker measures every storage the "
                                  "graph holds after it). Keep the settings backward needs too. (hints: checker hint "
                                  "lab9 flash.forward)")
        return o

    @staticmethod
    def backward(ctx, do):
        raise NotImplementedError("TODO(lab9): Returns one gradient per input of forward, in its order: the exact "
                                  "gradients of q, k and v for the upstream gradient do, then nothing for causal and "
                                  "the two tile sizes. Computed from what forward kept alone, tile by tile: no s x s "
                                  "tensor now either (the checker compares the gradients with torch's attention's to "
                                  "2e-5). (hints: checker hint lab9 flash.backward)")


def flash_attention(q, k, v, causal: bool = False, block_q: int = BLOCK, block_k: int = BLOCK):
    """softmax(q k^T / sqrt(d) [+ causal mask]) v for q, k, v of shape (batch, heads, seq, head_dim), any seq length;
    differentiable, keeping O(seq * head_dim) bytes for backward."""
    return FlashAttention.apply(q, k, v, causal, block_q, block_k)


def naive_attention(q, k, v, causal: bool = False):
    """The textbook formula, for comparison: keeps the (b, h, s, s) probabilities for backward."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    return torch.softmax(s, -1) @ v


def main() -> None:
    import torch.nn.functional as F

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 100, 16, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        out = flash_attention(q, k, v, causal)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        g = torch.randn_like(out)
        grads = torch.autograd.grad(out, (q, k, v), g)
        want = torch.autograd.grad(ref, (q, k, v), g)
        diff = max((a - b).abs().max().item() for a, b in zip((out, *grads), (ref, *want)))
        print(f"causal={causal}: max |flash - sdpa| over output and grads = {diff:.1e}")


if __name__ == "__main__":
    main()
