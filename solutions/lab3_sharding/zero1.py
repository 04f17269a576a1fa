"""ZeRO-1 by hand: shard the optimizer state, keep the rest replicated.

Per rank, fp32 AdamW, Ψ parameters, N ranks (the ZeRO paper's table in this course's precision):
    DDP      4Ψ weights + 4Ψ grads + 8Ψ moments      = 16Ψ
    ZeRO-1   4Ψ weights + 4Ψ grads + 8Ψ/N moments    = (8 + 8/N)Ψ      <- this file
    ZeRO-2   4Ψ weights + (4 + 8)Ψ/N                 = (4 + 12/N)Ψ
    ZeRO-3   (4 + 4 + 8)Ψ/N                          = 16Ψ/N           <- FSDP
(Mixed precision, the paper's setting: 2Ψ bf16 weights + 2Ψ bf16 grads + 12Ψ fp32 master
weights and moments: DDP 16Ψ, ZeRO-1 4Ψ + 12Ψ/N, ZeRO-2 2Ψ + 14Ψ/N, ZeRO-3 16Ψ/N.)

How: parameters are dealt to ranks whole, largest first, each to the rank with the fewest
elements so far (torch's ZeroRedundancyOptimizer does the same). Each rank builds the wrapped
optimizer over its own parameters only, so moments exist only for those. After the step, every
parameter is broadcast from its owner: one broadcast per tensor, 4Ψ bytes in all, which replaces
nothing (the gradients were still all-reduced) — ZeRO-1 buys memory, not speed.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def partition(sizes: list[int], world_size: int) -> list[int]:
    """Owner rank of each tensor: largest first, to the least-loaded rank (ties: lowest rank)."""
    # BEGIN SOLUTION sort tensor indices by size descending; give each to the rank with the smallest total so far; return owners in the original order
    load, owner = [0] * world_size, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        r = min(range(world_size), key=lambda r: load[r])
        owner[i] = r
        load[r] += sizes[i]
    return owner
    # END SOLUTION


class ShardedOptimizer:
    """Wraps any torch.optim class: `ShardedOptimizer(model.parameters() or param groups, torch.optim.AdamW, lr=...)`.

    `self.optim` is the local optimizer over this rank's parameters; its state is the only
    optimizer state this rank holds. Gradients must already be averaged across ranks (DDP).
    """

    def __init__(self, params, optimizer_cls, **defaults):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.all_params = [p for g in groups for p in g["params"]]
        owners = partition([p.numel() for p in self.all_params], self.world_size)
        self.owner = {id(p): r for p, r in zip(self.all_params, owners)}
        # BEGIN SOLUTION build self.optim = optimizer_cls over the same groups (same options) keeping only parameters this rank owns; drop groups left empty
        local = [{**g, "params": [p for p in g["params"] if self.owner[id(p)] == self.rank]} for g in groups]
        self.optim = optimizer_cls([g for g in local if g["params"]], **defaults)
        # END SOLUTION

    @property
    def param_groups(self):
        return self.optim.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.all_params:  # every gradient, not only ours: backward fills them all
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        # BEGIN SOLUTION step the local optimizer, then dist.broadcast every parameter from its owner rank
        self.optim.step()
        for p in self.all_params:
            dist.broadcast(p.data, src=self.owner[id(p)])
        # END SOLUTION

    def state_dict(self) -> dict:
        """This rank's shard of the optimizer state (save one file per rank)."""
        return self.optim.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optim.load_state_dict(state)
