"""Which rows of the sequence each rank holds under context parallelism, and what that does to causal work.

Plain split: rank r holds positions [r*s/N, (r+1)*s/N). Causal attention lets a query see only earlier keys, so
rank 0's queries see one block (half of it), rank N-1's see all N: per-rank work runs 1/2 : 3/2 : ... : N-1/2
(in block pairs), and the ring's step time is the slowest rank's: the first ranks idle most of the step.

Zig-zag split (Megatron-LM's "load-balanced" context parallelism, used by torchtitan as well): cut the sequence
into 2N chunks of c = s/(2N) and give rank r chunks r and 2N-1-r, in that order. A chunk a sees a*c^2 + c(c+1)/2
(query, key) pairs, so rank r sees (r + 2N-1-r) c^2 + c(c+1) = (2N-1) c^2 + c(c+1): the same on every rank.

    N = 4, s = 16, c = 2:   rank 0: chunks 0, 7   rank 1: 1, 6   rank 2: 2, 5   rank 3: 3, 4
"""
from __future__ import annotations

import torch

LAYOUTS = ("contiguous", "zigzag")


def zigzag_shard(x: torch.Tensor, rank: int, world: int, dim: int = 2) -> torch.Tensor:
    """This rank's part of x along `dim` under the zig-zag layout: chunks rank and 2*world-1-rank of 2*world,
    concatenated in that order (x.shape[dim] must be a multiple of 2*world)."""
    # BEGIN SOLUTION The result holds, along dim, chunk number rank followed by chunk number
    #                2*world - 1 - rank of the 2*world equal chunks of x, so that every rank holds one early and
    #                one late part of the sequence and the ranks' causal work is equal (see the module docstring).
    # HINT 1         Which two of the 2N chunks must a rank hold so that the sum of their positions is the same
    #                on every rank?
    # HINT 2         Split x into 2N equal chunks along dim, pick two, and join them in the stated order.
    # HINT 3         chunks = x.chunk(2 * world, dim); return torch.cat([chunks[rank], chunks[2*world-1-rank]], dim).
    chunks = x.chunk(2 * world, dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim)
    # END SOLUTION


def positions(s: int, rank: int, world: int, layout: str = "contiguous", device=None) -> torch.Tensor:
    """Global positions (0..s-1) of the s/world rows that rank holds of a sequence of s, in the order it holds
    them: the positions a causal mask must compare."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    return zigzag_shard(torch.arange(s, device=device), rank, world, 0) if layout == "zigzag" else \
        torch.arange(rank * s // world, (rank + 1) * s // world, device=device)


def causal_pairs(s: int, world: int, layout: str = "contiguous") -> list[int]:
    """(query, key) pairs with key <= query that each rank's queries see: its share of causal attention's work."""
    return [int(sum(int(p) + 1 for p in positions(s, r, world, layout))) for r in range(world)]


if __name__ == "__main__":
    for layout in LAYOUTS:
        print(layout, causal_pairs(64, 4, layout))
