"""ZeRO-1 by hand, the first idea: deal whole tensors to ranks, shard the optimizer state that way.

What a rank holds under each strategy, fp32 and mixed precision, is this lab's README table to fill in and
memory_model.bytes_per_rank to write: derive ZeRO-1's row from what this file keeps whole on every rank and what it
splits between them.

What holds: every parameter has one owner rank, dealt whole so that the ranks' elements are as
even as whole tensors allow; only the owner keeps its optimizer state and updates it; after the step every rank
holds every new value.

What whole tensors cost, and why zero2.py slices flat buffers instead:
- bytes: the shares are only as even as the tensor sizes allow (tiny, N = 2: 1.019 and 0.981 of
  8Ψ/N; one tensor and two ranks: one rank holds everything, the other nothing);
- communication: the gradients arrive all-reduced by DDP (2·4Ψ(N−1)/N bytes per rank) and the
  step's own traffic adds 4Ψ(N−1)/N more (its contract), 1.5× DDP. That is the price of this layout, not of ZeRO:
  an all-reduce can be cut in two halves of S(N−1)/N bytes each, and a layout that puts the optimizer step between
  them moves exactly DDP's 2·4Ψ(N−1)/N (zero2.py).

A torch.optim.Optimizer: param_groups are the full groups (an LR scheduler edits them; each step
copies their hyperparameters to the local optimizer's groups), step(closure, **kwargs) is accepted, a group
added later is dealt and stepped (add_param_group), consolidate_state_dict gathers the whole state on one
rank, and a rank that owns no parameter steps an empty optimizer and still takes part in all of the step's traffic.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def partition(sizes: list[int], world_size: int, loads: list[int] | None = None) -> list[int]:
    """Owner rank of each tensor. `loads`: elements each rank owns already (add_param_group deals a new group on top
    of the constructor's); none by default."""
    # BEGIN SOLUTION Returns one owner rank per tensor, in the given order: each tensor whole, on exactly one rank.
    #                The owners are fixed by sizes, loads and N alone, so that every rank derives the same ones
    #                without a message (and a rank's optimizer shard saved by one implementation loads into
    #                another): read the tensors from the largest to the smallest, equal sizes in their given order;
    #                each one's owner is a rank that held the fewest elements at that point of the reading (its
    #                `loads` entry plus the tensors read before), the lowest-numbered such rank on a tie. What that
    #                buys, to reason with: a heaviest rank that owns one of these tensors exceeds the lightest by at
    #                most the smallest of them it owns; without `loads`, no rank ends more than one tensor above the
    #                mean. tiny at N = 2: 1.019 and 0.981 of Ψ/N; one tensor, two ranks: all and nothing.
    # HINT 1         Greedy balancing. Why does the order of dealing matter: deal the big tensors last and how far
    #                over Ψ/N can one rank end up? What does a rank's load have to be at the moment a tensor is
    #                given to it, for the bound above to follow? And what lets every rank agree without a message?
    # HINT 2         A list of per-rank loads (a copy of `loads`, or zeros); the tensor indices sorted by size,
    #                descending, a stable sort; for each index, the rank of least load (the first such rank) takes it
    #                and its load grows by the size. (torch's ZeroRedundancyOptimizer deals its parameters this way.)
    # HINT 3         Sort tensor indices by size descending (stable); give each to the rank with the smallest total so
    #                far, the lowest on a tie (min over ranks, by load); return owners in the original order.
    load, owner = list(loads) if loads else [0] * world_size, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        r = min(range(world_size), key=lambda r: load[r])
        owner[i] = r
        load[r] += sizes[i]
    return owner
    # END SOLUTION


def sync_hyperparameters(outer: list[dict], local: list[dict]) -> None:
    """Copy lr, weight_decay, ... (what a scheduler or the learner changed) onto the local groups."""
    for g, lg in zip(outer, local):
        lg.update({k: v for k, v in g.items() if k != "params"})


class ShardedOptimizer(torch.optim.Optimizer):
    """Wraps any torch.optim class: `ShardedOptimizer(model.parameters() or param groups, torch.optim.AdamW, lr=...)`.

    `self.optim` is the local optimizer over this rank's parameters; its state is the only
    optimizer state this rank holds. Gradients must already be averaged across ranks (DDP).
    """

    def __init__(self, params, optimizer_cls, **defaults):
        super().__init__(params, defaults)  # torch's checks: a bare tensor is a TypeError, an empty list a ValueError
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.all_params = [p for g in self.param_groups for p in g["params"]]
        owners = partition([p.numel() for p in self.all_params], self.world_size)
        self.owner = {id(p): r for p, r in zip(self.all_params, owners)}
        # BEGIN SOLUTION Afterwards self.optim is an optimizer_cls with the given options whose state can only ever
        #                cover the parameters this rank owns (self.owner), and whose i-th param group is this rank's
        #                share of self.param_groups[i], with that group's hyperparameters, even where the share is
        #                empty: each step copies the hyperparameters across by position (sync_hyperparameters).
        #                AdamW's moments then cost 8 B x the owned elements, about 8Ψ/N per rank instead of 8Ψ.
        # HINT 1         An optimizer creates state for every parameter it is handed. What must the local optimizer
        #                never see? And why keep its groups one-to-one with the outer groups, when a scheduler edits
        #                the outer groups' learning rates and the step copies them across by position?
        # HINT 2         A list of group dicts: a copy of each of self.param_groups whose "params" keeps only the
        #                parameters whose self.owner entry is this rank; optimizer_cls takes such a list and **defaults.
        # HINT 3         Build self.optim = optimizer_cls over the same groups (same options, one local group per
        #                group, empty where this rank owns none of it), keeping only the parameters this rank owns.
        local = [{**g, "params": [p for p in g["params"] if self.owner[id(p)] == self.rank]} for g in self.param_groups]
        self.optim = optimizer_cls(local, **defaults)
        # END SOLUTION

    def add_param_group(self, param_group: dict) -> None:
        """A group added after construction is stepped from then on (torch's contract): torch checks it and fills
        its defaults, partition() deals its tensors on top of what each rank owns already (every rank derives the
        same owners), and this rank's share becomes a new local group, so local groups stay one per outer group."""
        super().add_param_group(param_group)
        if "optim" not in self.__dict__:  # Optimizer.__init__ adding the constructor's groups: __init__ deals them
            return
        group = self.param_groups[-1]
        load = [0] * self.world_size
        for q in self.all_params:
            load[self.owner[id(q)]] += q.numel()
        owners = partition([q.numel() for q in group["params"]], self.world_size, load)
        self.owner.update({id(q): r for q, r in zip(group["params"], owners)})
        self.all_params += group["params"]
        # BEGIN SOLUTION Afterwards the local optimizer has one group more, at the new outer group's position: this
        #                rank's share of the new group (possibly empty), with that group's hyperparameters. So the local
        #                groups stay one per outer group (the step copies hyperparameters across by position), the
        #                parameters another rank owns never get state here, and from the next step on the new ones are
        #                stepped by their owners.
        # HINT 1         The same question as the constructor's, for one group arriving late: what must the local
        #                optimizer see of it, and where in its list of groups must that go?
        # HINT 2         The local optimizer's own add_param_group, given a copy of the new outer group (the last of
        #                self.param_groups, defaults filled in) whose "params" keeps only what self.owner gives this
        #                rank.
        # HINT 3         self.optim.add_param_group with {**group, "params": the parameters of group whose owner is
        #                self.rank}, an empty list included.
        self.optim.add_param_group({**group, "params": [q for q in group["params"] if self.owner[id(q)] == self.rank]})
        # END SOLUTION

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Every rank's shard of the optimizer state gathered on rank `to` (every rank calls it), as torch's
        ZeroRedundancyOptimizer does before a full save: afterwards `self.consolidated` there is one optimizer
        state dict over every parameter, indexed as an unsharded optimizer over the same groups indexes it (None on
        the other ranks). state_dict() stays this rank's shard: the course saves one file per rank."""
        index = {id(q): i for i, q in enumerate(self.all_params)}
        mine = [index[id(q)] for g in self.optim.param_groups for q in g["params"]]  # local position -> global
        shard = {mine[k]: v for k, v in self.optim.state_dict()["state"].items()}
        shards = [None] * self.world_size if self.rank == to else None
        dist.gather_object(shard, shards, dst=to)
        self.consolidated = None
        if self.rank == to:
            groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(q)] for q in g["params"]]}
                      for g in self.param_groups]
            self.consolidated = {"state": {k: v for sh in shards for k, v in sh.items()}, "param_groups": groups}

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        sync_hyperparameters(self.param_groups, self.optim.param_groups)
        # BEGIN SOLUTION On return every rank holds the same weights, each parameter as its owner's optimizer updated
        #                it (the owner is the only rank with its state), a rank that owns nothing included. What this
        #                rank sends for it is one copy of the weights' worth, 4Ψ·(N−1)/N bytes per step (the checker
        #                counts it), on top of DDP's 8Ψ·(N−1)/N gradient all-reduce: 1.5x DDP in all. Keyword
        #                arguments given to the step reach the local optimizer's step.
        # HINT 1         After the local step, a rank's own parameters are new and everyone else's are stale. For each
        #                parameter: who has the new value, who needs it, and what happens if one rank skips a copy?
        # HINT 2         A broadcast per parameter, rooted at its owner (self.owner), over self.all_params in their
        #                fixed order, after stepping self.optim (with the caller's keyword arguments).
        # HINT 3         Step the local optimizer (passing **kwargs on), then dist.broadcast every parameter (p.data)
        #                from its owner rank.
        self.optim.step(**kwargs)
        for p in self.all_params:
            dist.broadcast(p.data, src=self.owner[id(p)])
        # END SOLUTION
        return loss

    def state_dict(self) -> dict:
        """This rank's shard of the optimizer state (save one file per rank)."""
        return self.optim.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optim.load_state_dict(state)
