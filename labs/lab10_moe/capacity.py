# GENERATED from solutions/lab10_moe/capacity.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Capacity: each expert takes at most C tokens per batch; the choices past C are dropped.

    python -m labs.lab10_moe.capacity    # drop rate against the capacity factor, for a skewed router

Experts run as dense batched matmuls, and with expert parallelism each expert's rank must size its buffers before
the tokens arrive: so each expert takes at most C = ceil(factor * T * k / E) of a batch's T*k choices (factor 1:
exactly the even share). A choice past its expert's C is dropped: it adds nothing to the token's output, and the
token still passes through the block's residual connection (x + moe(ln(x))), so a dropped token is not lost,
only unprocessed by that expert.

Who gets the slots: GShard's order. All first choices (the expert each token wanted most), in token order, then
all second choices, and so on. A token's best expert thus outranks any token's second-best one: with k = 2 and
a full expert, the tokens that lose it are those for which it was only the runner-up.

Arithmetic: factor 1.25, T = 4096 tokens, k = 2, E = 8: C = ceil(1.25 * 8192 / 8) = 1280 slots per expert,
10240 slots for 8192 choices; even routing drops nothing, and an expert may receive 25% over the mean before it
drops. Memory and compute scale with the factor; drops fall with it.
"""
from __future__ import annotations

import math

import torch


def capacity(n_tokens: int, k: int, n_experts: int, factor: float) -> int:
    """C = ceil(factor * T * k / E): the most choices one expert takes from a batch of T tokens."""
    return math.ceil(factor * n_tokens * k / n_experts)


def keep_mask(ids: torch.Tensor, n_experts: int, cap: int) -> torch.Tensor:
    """ids (T, k) -> bool (T, k): True where the choice fits in its expert's first `cap` slots, slots given to all
    first choices in token order, then all second choices, and so on."""
    raise NotImplementedError("TODO(lab10): keep[t, j] is True exactly when fewer than cap choices come before (t, j) "
                              "for the same expert in the order: choice rank j first (all j = 0, then all j = 1, ...), "
                              "token index t second. No Python loop over tokens: T is thousands per step. (hints: "
                              "checker hint lab10 capacity.keep_mask)")


def main() -> None:
    from .router import route

    torch.manual_seed(0)
    T, E, k = 1024, 8, 2
    scores = torch.randn(T, E) + torch.linspace(1.5, 0, E)
    ids, _ = route(scores, k)
    for factor in (0.5, 1.0, 1.25, 1.5, 2.0):
        keep = keep_mask(ids, E, capacity(T, k, E, factor))
        print(f"capacity factor {factor:4}: {capacity(T, k, E, factor):4} slots per expert, "
              f"{1 - keep.float().mean().item():6.1%} of choices dropped")


if __name__ == "__main__":
    main()
