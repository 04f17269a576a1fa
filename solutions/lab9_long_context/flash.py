"""FlashAttention-2 in plain PyTorch: attention by tiles, never holding the s x s score matrix.

    python -m solutions.lab9_long_context.flash        # output and gradients vs scaled_dot_product_attention

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
    # BEGIN SOLUTION Returns (o, lse): for every query row, o is the softmax-weighted sum of v over the keys that
    #                row sees (scores q.k / √d) and lse the natural log of the sum of e^score over those keys, both
    #                as if the row had been computed whole (the checker compares with torch's attention to 2e-5, at
    #                lengths no tile divides); a row that sees no key gets o = 0 and lse = -inf. Yet no more than
    #                block_q x block_k scores exist at any time per batch and head: the s x s matrix never does, and a
    #                row's largest score is known only once its last tile has been seen. Causal: a key at a later
    #                global position than its query is invisible, and a tile in which no query sees any key is never
    #                computed (the checker counts matmul FLOPs).
    # HINT 1         Softmax of a row whose maximum you learn only tile by tile: what must you keep per row, and
    #                what happens to everything summed so far when a new tile raises the maximum? And what is the
    #                row's log-sum-exp, in terms of what you kept?
    # HINT 2         Query tiles outside, key tiles inside. Per query row keep m (running max), ell (running sum of
    #                exp(score - m)) and acc (running exp(score - m) @ v); rescale ell and acc by exp(m_old - m_new)
    #                before adding a tile; after the last tile o = acc / ell and lse = m + log ell. Skip a tile when
    #                min(key positions) > max(query positions); masked scores are -inf.
    # HINT 3         scale = 1/sqrt(d); o = zeros_like(q); lse = full((b,h,sq), -inf). For each query tile i: qi =
    #                q tile * scale, qp its positions; m = -inf, ell = 0, acc = 0 (shapes (b,h,bq), (b,h,bq),
    #                (b,h,bq,d)). For each key tile j: skip if causal and k_pos tile min > qp max; s = qi @ kj^T;
    #                causal: fill -inf where k_pos[None, :] > q_pos[:, None]; m_new = max(m, s.amax(-1)); use 0
    #                instead of m_new where it is -inf (rows that saw nothing yet); p = exp(s - m_new); alpha = exp(m
    #                - m_new); ell = ell*alpha + p.sum(-1); acc = acc*alpha + p @ vj; m = m_new. Then o tile = acc /
    #                ell (0 where ell = 0) and lse tile = m + log(ell).
    scale = 1.0 / math.sqrt(d)
    o = torch.zeros_like(q)
    lse = torch.full((b, h, sq), -math.inf, dtype=torch.float32, device=q.device)
    for i in range(0, sq, block_q):
        qi, qp = q[:, :, i:i + block_q] * scale, q_pos[i:i + block_q]
        m = torch.full((b, h, qi.shape[2]), -math.inf, dtype=torch.float32, device=q.device)
        ell = torch.zeros_like(m)
        acc = torch.zeros_like(qi)
        for j in range(0, sk, block_k):
            kp = k_pos[j:j + block_k]
            if causal and kp.min() > qp.max():
                continue  # the whole tile is in the future of every query of this tile
            s = qi @ k[:, :, j:j + block_k].transpose(-2, -1)
            if causal:
                s = s.masked_fill(kp[None, :] > qp[:, None], -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)  # a row with nothing visible yet: exp(-inf) = 0
            p = torch.exp(s - m_safe[..., None])
            alpha = torch.exp(m - m_safe)
            ell = ell * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + p @ v[:, :, j:j + block_k]
            m = m_new
        o[:, :, i:i + block_q] = acc / torch.where(ell == 0, 1.0, ell)[..., None]
        lse[:, :, i:i + block_q] = m + torch.log(ell)
    # END SOLUTION
    return o, lse


def attend_backward(q, k, v, o, lse, do, q_pos, k_pos, causal: bool, block_q: int = BLOCK, block_k: int = BLOCK):
    """(dq, dk, dv): the gradients of attention's loss through these keys only, recomputing each tile's
    probabilities from lse (the log-sum-exp of each query's WHOLE row: a partial one gives wrong gradients)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    sq, sk = q.shape[2], k.shape[2]
    # BEGIN SOLUTION dq, dk, dv are the exact gradients of the attention output's loss (upstream gradient
    #                do) through these keys, equal to autograd through the naive formula; no tensor larger than a
    #                block_q x block_k tile per (b, h) is created, and tiles entirely above the diagonal are skipped.
    # HINT 1         Forward kept no probabilities, only q, k, v, o and lse. Which quantity lets you rebuild any one
    #                tile of the softmax exactly, and which row statistic of do and o does the softmax's gradient need?
    # HINT 2         P_tile = exp(q k^T * scale - lse) (masked entries 0); D = rowsum(do * o) once; then the
    #                per-tile chain rule: dV, dP, dS = P * (dP - D), dQ, dK; loop keys outside, queries inside.
    # HINT 3         D = (do * o).sum(-1). For each key tile j, each query tile i (skip as in forward):
    #                s = (q_i @ k_j^T) * scale, masked to -inf; p = exp(s - lse_i[..., None]); dv_j += p^T @ do_i;
    #                dp = do_i @ v_j^T; ds = p * (dp - D_i[..., None]); dq_i += ds @ k_j * scale;
    #                dk_j += ds^T @ q_i * scale.
    delta = (do * o).sum(-1)
    for j in range(0, sk, block_k):
        kj, vj, kp = k[:, :, j:j + block_k], v[:, :, j:j + block_k], k_pos[j:j + block_k]
        for i in range(0, sq, block_q):
            qp = q_pos[i:i + block_q]
            if causal and kp.min() > qp.max():
                continue
            qi, doi = q[:, :, i:i + block_q], do[:, :, i:i + block_q]
            s = (qi @ kj.transpose(-2, -1)) * scale
            if causal:
                s = s.masked_fill(kp[None, :] > qp[:, None], -math.inf)
            p = torch.exp(s - lse[:, :, i:i + block_q, None])
            dv[:, :, j:j + block_k] += p.transpose(-2, -1) @ doi
            ds = p * (doi @ vj.transpose(-2, -1) - delta[:, :, i:i + block_q, None])
            dq[:, :, i:i + block_q] += (ds @ kj) * scale
            dk[:, :, j:j + block_k] += (ds.transpose(-2, -1) @ qi) * scale
    # END SOLUTION
    return dq, dk, dv


def merge(o1, lse1, o2, lse2):
    """(o, lse) of attention over the union of two disjoint key sets, from each set's (o, lse)."""
    # BEGIN SOLUTION o equals attention over both key sets at once and lse its log-sum-exp: each partial
    #                output is a softmax normalised by its own sum, so it must be re-weighted by the share of the
    #                total that its keys hold. A row with lse -inf on one side (no visible key) takes the other side.
    # HINT 1         Each o_i is a weighted sum of v whose weights sum to 1 over its own keys. Over the union they
    #                must sum to 1 over all keys: what share of the union's total does each side's lse give it?
    # HINT 2         lse = log(exp(lse1) + exp(lse2)) computed stably; weights exp(lse_i - lse); guard -inf - -inf.
    # HINT 3         lse = logaddexp(lse1, lse2); lse_safe = lse with -inf replaced by 0;
    #                o = o1 * exp(lse1 - lse_safe)[..., None] + o2 * exp(lse2 - lse_safe)[..., None].
    lse = torch.logaddexp(lse1, lse2)
    safe = lse.masked_fill(lse == -math.inf, 0.0)
    o = o1 * torch.exp(lse1 - safe)[..., None] + o2 * torch.exp(lse2 - safe)[..., None]
    return o, lse
    # END SOLUTION


class FlashAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(d)) v with O(s*d) memory kept for backward, which recomputes the rest."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k):
        pos_q = torch.arange(q.shape[2], device=q.device)
        pos_k = pos_q if k.shape[2] == q.shape[2] else torch.arange(k.shape[2], device=q.device)
        o, lse = attend(q, k, v, pos_q, pos_k, causal, block_q, block_k)
        # BEGIN SOLUTION Backward (yours too) can run from what is kept here alone, and what is kept grows as s*d, not
        #                s*s: the three inputs, the output and one fp32 number per query row (4*b*h*s*d + b*h*s floats),
        #                held where autograd can free them with the graph; nothing of size s*s survives forward (the
        #                checker measures every storage the graph holds after it). Keep the settings backward needs too.
        # HINT 1         Which tensors does backward's tile loop read, and which of forward's intermediates can it
        #                rebuild from them instead of keeping?
        # HINT 2         Save q, k, v, o and lse on ctx (the mechanism that lets autograd free them at the right
        #                time); plain Python values (causal, tile sizes) as ctx attributes.
        # HINT 3         ctx.save_for_backward(q, k, v, o, lse); ctx.causal, ctx.blocks = causal, (block_q, block_k).
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.blocks = causal, (block_q, block_k)
        # END SOLUTION
        return o

    @staticmethod
    def backward(ctx, do):
        # BEGIN SOLUTION Returns one gradient per input of forward, in its order: the exact gradients of q, k and v
        #                for the upstream gradient do, then nothing for causal and the two tile sizes. Computed from
        #                what forward kept alone, tile by tile: no s x s tensor now either (the checker compares the
        #                gradients with torch's attention's to 2e-5).
        # HINT 1         Which of forward's quantities does the tile backward read, and where did forward leave them?
        #                Which global positions do this call's query and key rows have?
        # HINT 2         Unpack what forward saved and its settings from ctx; the positions as forward made them (0..s-1
        #                on each side); attend_backward on a contiguous do; None for each input that is not a tensor.
        # HINT 3         q, k, v, o, lse = ctx.saved_tensors; pos_q, pos_k as in forward; dq, dk, dv =
        #                attend_backward(q, k, v, o, lse, do.contiguous(), pos_q, pos_k, ctx.causal, *ctx.blocks);
        #                return dq, dk, dv, None, None, None.
        q, k, v, o, lse = ctx.saved_tensors
        pos_q = torch.arange(q.shape[2], device=q.device)
        pos_k = pos_q if k.shape[2] == q.shape[2] else torch.arange(k.shape[2], device=q.device)
        dq, dk, dv = attend_backward(q, k, v, o, lse, do.contiguous(), pos_q, pos_k, ctx.causal, *ctx.blocks)
        return dq, dk, dv, None, None, None
        # END SOLUTION


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
