"""The router: which k experts each token goes to, with what weights, and the loss that keeps them evenly used.

    python -m solutions.lab10_moe.router      # route a skewed batch, print tokens per expert and the aux loss

A token's scores over E experts (one linear layer, h -> E) become probabilities by a softmax. The token goes to
the k most probable experts; its output is the weighted sum of theirs, weights = those k probabilities
renormalised to sum to 1 (Mixtral's form: with k = 1 every weight is 1, and the router learns only from the
balancing terms). Selection may add a per-expert bias (DeepSeek-V3's aux-loss-free balancing, update_bias in
ep_step.py): the bias moves which experts win, never the weights, so it shifts load without biasing outputs.

Balance. Left alone, a router collapses onto a few experts (they train faster, so they win more tokens). The
Switch/GShard auxiliary loss is E * sum_e f_e * P_e, with f_e the fraction of the T*k choices that went to
expert e and P_e the mean probability the router gave e. f is a count (no gradient); P carries the gradient,
pushing probability away from the experts that win most. Uniform routing gives f_e = P_e = 1/E: loss 1, its
minimum over f for a given P (and over P for a given f) when the other is uniform.
"""
from __future__ import annotations

import torch


def route(scores: torch.Tensor, k: int, bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """scores (T, E) -> (ids (T, k) int64, weights (T, k) float32).

    ids[t] are the k experts with the largest softmax(scores[t]) + bias (bias: selection only), best first; equal
    values go to the lower expert index first. weights[t] are softmax(scores[t]) at ids[t], divided by their sum.
    Differentiable in scores through the weights."""
    # BEGIN SOLUTION ids: per token, the k experts whose probability (+ bias, when given) is largest, in
    #                decreasing order, equal values broken towards the lower expert index; weights: the
    #                probabilities (never the biased values) at those experts, renormalised over the k to sum to 1,
    #                float32 whatever the scores' dtype, with gradients flowing to the scores.
    # HINT 1         Which tensor decides WHO is chosen, and which one decides HOW MUCH each chosen expert counts?
    #                What does torch promise about the order of equal values?
    # HINT 2         A stable descending sort of the selection values gives the tie order the contract asks for;
    #                gather the probabilities at the chosen indices and normalise them.
    # HINT 3         probs = softmax(scores.float(), -1); sel = probs + bias if bias is not None else probs;
    #                ids = argsort(sel, -1, descending=True, stable=True)[:, :k]; w = probs.gather(1, ids);
    #                return ids, w / w.sum(-1, keepdim=True).
    probs = torch.softmax(scores.float(), dim=-1)
    sel = probs if bias is None else probs + bias
    ids = torch.argsort(sel.detach(), dim=-1, descending=True, stable=True)[:, :k]
    w = probs.gather(1, ids)
    return ids, w / w.sum(dim=-1, keepdim=True)
    # END SOLUTION


def load_balancing_loss(probs: torch.Tensor, ids: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Switch/GShard auxiliary loss: E * sum_e f_e * P_e over this batch. probs (T, E) the router's softmax, ids
    (T, k) the experts chosen (before any capacity drop). f_e = (choices of e) / (T k), a count, no gradient;
    P_e = mean over tokens of probs[:, e], differentiable. 1.0 when routing is uniform."""
    # BEGIN SOLUTION A scalar equal to E * sum_e f_e P_e, where f_e is the share of all T*k choices that picked
    #                expert e and P_e the mean router probability of e over the T tokens. Its gradient reaches the
    #                probabilities through P only: f is a count.
    # HINT 1         Two per-expert vectors of length E, one from the choices, one from the probabilities: which
    #                one can carry a gradient at all?
    # HINT 2         Count choices per expert (a histogram of ids), divide by T*k; average probs over tokens.
    # HINT 3         f = torch.bincount(ids.flatten(), minlength=E).float() / ids.numel(); P = probs.mean(0);
    #                return E * (f * P).sum().
    f = torch.bincount(ids.flatten(), minlength=n_experts).to(probs.dtype) / ids.numel()
    return n_experts * (f * probs.mean(dim=0)).sum()
    # END SOLUTION


def main() -> None:
    torch.manual_seed(0)
    T, E, k = 512, 8, 2
    scores = torch.randn(T, E) + torch.linspace(2, 0, E)  # expert 0 favoured
    ids, w = route(scores, k)
    probs = torch.softmax(scores, -1)
    counts = torch.bincount(ids.flatten(), minlength=E)
    print(f"{T} tokens, top-{k} of {E}: tokens per expert {counts.tolist()} (uniform: {T * k // E}); "
          f"aux loss {load_balancing_loss(probs, ids, E).item():.3f} (1.0 when uniform); "
          f"weights sum to 1: {torch.allclose(w.sum(-1), torch.ones(T))}")


if __name__ == "__main__":
    main()
