"""Lab 10, the checker's own mixture of experts: written from the contracts, in another form than the course's
solution, so that agreeing with it means agreeing with the contract, not with one implementation.

Routing and slots are decided in plain Python, token by token (the shapes graded are tiny): a choice's rank by
sorting (-value, expert), the slots by counters walked in GShard's order. The layer runs DENSE: every expert on
every token, the outputs mixed by a (T, E) gate matrix that is zero where a token did not choose the expert or
its choice was dropped. No gather, no scatter, no all-to-all: nothing a learner's dispatch could share a slip with.
"""
from __future__ import annotations

import math


def choose(probs, k: int, bias=None) -> list[list[int]]:
    """Per token, the k experts with the largest probs (+ bias), best first, ties to the lower index."""
    sel = probs.detach() if bias is None else probs.detach() + bias  # float32 values, as the contract sums them
    return [sorted(range(len(row)), key=lambda e: (-row[e], e))[:k] for row in sel.tolist()]


def capacity(n_tokens: int, k: int, n_experts: int, factor: float) -> int:
    return math.ceil(factor * n_tokens * k / n_experts)


def keep(ids: list[list[int]], n_experts: int, cap: int) -> list[list[bool]]:
    """GShard's order: every token's first choice, in token order, then every second choice, ..."""
    used, out = [0] * n_experts, [[False] * len(row) for row in ids]
    for j in range(len(ids[0]) if ids else 0):
        for t, row in enumerate(ids):
            if used[row[j]] < cap:
                used[row[j]] += 1
                out[t][j] = True
    return out


def gate(scores, k: int, factor: float, bias=None):
    """(G (T, E) differentiable in scores, ids, kept, probs): G[t, e] = renormalised weight of a kept choice."""
    import torch

    probs = torch.softmax(scores.float(), -1)
    ids = choose(probs, k, bias)
    t_n, e_n = probs.shape
    kept = keep(ids, e_n, capacity(t_n, k, e_n, factor))
    chosen = torch.zeros(t_n, e_n, dtype=torch.bool)
    mask = torch.zeros(t_n, e_n)
    for t, (row, ks) in enumerate(zip(ids, kept)):
        for e, kk in zip(row, ks):
            chosen[t, e] = True
            mask[t, e] = float(kk)
    picked = probs * chosen  # the k chosen probabilities, zero elsewhere
    weights = picked / picked.sum(-1, keepdim=True)
    return weights * mask.to(scores.device), ids, kept, probs


def aux_loss(probs, ids) -> "torch.Tensor":  # noqa: F821 - torch imported by the caller's process
    t_n, e_n = probs.shape
    f = [0.0] * e_n
    for row in ids:
        for e in row:
            f[e] += 1.0 / (t_n * len(row))
    return e_n * sum(f[e] * probs[:, e].mean() for e in range(e_n))


def moe_forward(x, router_w, w1, w2, k: int, factor: float, bias=None):
    """(output (T, h), G, ids, kept, probs): every expert on every token, mixed by G."""
    import torch
    import torch.nn.functional as F

    G, ids, kept, probs = gate(x @ router_w.t(), k, factor, bias)
    every = torch.stack([F.gelu(x @ w1[e]) @ w2[e] for e in range(w1.shape[0])], 1)  # (T, E, h)
    return (G.to(x.dtype)[:, :, None] * every).sum(1), G, ids, kept, probs


class RefMoE:
    """The reference layer as a torch module (built lazily: this file is imported where torch is not)."""

    @staticmethod
    def make(hidden: int, n_experts: int, k: int, ffn: int, factor: float, gen):
        import torch
        import torch.nn as nn

        class _Ref(nn.Module):
            def __init__(self):
                super().__init__()
                self.n_experts, self.k, self.capacity_factor = n_experts, k, factor
                self.router = nn.Linear(hidden, n_experts, bias=False)
                with torch.no_grad():
                    self.router.weight.copy_(torch.randn(n_experts, hidden, generator=gen) * 0.3)
                self.w1 = nn.Parameter(torch.randn(n_experts, hidden, ffn, generator=gen) * 0.05)
                self.w2 = nn.Parameter(torch.randn(n_experts, ffn, hidden, generator=gen) * 0.05)
                self.register_buffer("bias", torch.zeros(n_experts))
                self.aux_loss, self.counts = None, None

            def forward(self, x):
                xt = x.reshape(-1, x.shape[-1])
                out, _, ids, _, probs = moe_forward(xt, self.router.weight, self.w1, self.w2, self.k,
                                                    self.capacity_factor, self.bias)
                self.aux_loss = aux_loss(probs, ids)
                self.counts = torch.bincount(torch.tensor(ids).flatten(), minlength=self.n_experts)
                return out.view_as(x)

        return _Ref()
