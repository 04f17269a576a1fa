# GENERATED from solutions/lab10_moe/ep_step.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""EP x DP: a training step of the course GPT with MoE blocks, experts over one dimension of a 2-D mesh.

    torchrun --nproc_per_node 4 -m labs.lab10_moe.ep_step       # mesh (dp=2, ep=2): losses and biases

World W = dp x ep ranks, rank = d * ep + e. Every rank holds its own tokens. The ep group of rank (d, e) is the
ranks (d, 0..ep-1): they share the experts between them (rank e holds experts e*E/ep ..). The dp group is the
ranks (0..dp-1, e): they hold the SAME experts, replicas of each other. The dense weights (attention, norms,
embeddings, routers) are replicated on all W ranks.

Which gradient is reduced over which ranks is this file's question. The step minimises the mean over all W ranks
of each rank's loss (its tokens' mean cross-entropy + aux_coef * its routers' aux losses), L = (1/W) sum_r L_r,
so every .grad must end as dL/dw. What backward leaves on each rank to start from:
  - a dense weight's .grad on rank r is dL_r/dw, its own rank's term only;
  - an expert weight on rank (d, e) has already been reached by every token of its ep group that chose it (the
    all-to-all's backward brought those gradients home): its .grad is the sum over the ranks of ep group d of
    dL_r/dw. The ranks of the other ep groups hold the rest of the sum, in their replicas of the same expert.
Work out, for each kind, which ranks must meet, with which reduction, and what to divide by; and what an expert's
gradient would become if it met a rank that holds other experts in its slot. The bytes follow: the dense
gradients over their ranks, the expert gradients (E/ep experts' weights, not E) over theirs, the all-to-alls of
every MoE layer (expert_parallel.py), and E counts per layer.

Balance without an aux loss (DeepSeek-V3): after each step every expert's selection bias moves by gamma toward
the mean load: bias_e += gamma * sign(mean load - load_e). The loads must be counted over ALL ranks' tokens:
each rank's routing uses the bias, and a bias updated from local counts would differ between ranks.
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from .moe import moe_layers

AUX_COEF = 0.01  # Switch's alpha: small enough not to fight the task loss, big enough to stop a collapse
GAMMA = 1e-3  # DeepSeek-V3's bias update speed, per step


def update_bias(bias: torch.Tensor, counts: torch.Tensor, gamma: float) -> None:
    """In place: bias_e += gamma * sign(mean(counts) - counts_e). counts: tokens routed to each expert (E,)."""
    raise NotImplementedError("TODO(lab10): Each expert's bias moves by exactly gamma toward balance: up when the "
                              "expert received fewer tokens than the mean, down when more, unchanged when equal. In "
                              "place, no gradient. (hints: checker hint lab10 ep_step.update_bias)")


def expert_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for m in moe_layers(model) for p in (m.w1, m.w2)]


def reduce_gradients(model: torch.nn.Module, dp_group=None) -> None:
    """Every .grad becomes the gradient of the mean loss over all ranks, dense and expert weights alike. dp_group:
    the ranks holding the same experts as this one (None: every rank, as in torch.distributed)."""
    world = dist.get_world_size()
    raise NotImplementedError("TODO(lab10): Afterwards each .grad is d/dw of (1/W) sum_r L_r. A dense weight's local "
                              ".grad is its own rank's term; an expert weight's local .grad already sums the terms of "
                              "its whole ep group (the all-to-all's backward brought them home). Expert gradients must "
                              "never meet another expert's: only ranks holding the same experts (dp_group) may "
                              "exchange them. (hints: checker hint lab10 ep_step.reduce_gradients)")


def ep_dp_step(model, optimizer, batch, dp_group=None, aux_coef: float = AUX_COEF, gamma: float = GAMMA) -> float:
    """One step on this rank's (x, y): forward, loss + aux_coef * sum of the MoE layers' aux losses, backward,
    reduce_gradients, optimizer step, then every MoE layer's bias updated from its counts over ALL ranks.
    Returns the mean over all ranks of their losses (the objective the step descends)."""
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    total = loss + aux_coef * sum(m.aux_loss for m in moe_layers(model))
    total.backward()
    reduce_gradients(model, dp_group)
    optimizer.step()
    raise NotImplementedError("TODO(lab10): Every rank's bias vectors end equal, each moved by update_bias from the "
                              "tokens routed to each expert by ALL ranks this step (a layer's counts are per rank: its "
                              ".counts). (hints: checker hint lab10 ep_step.ep_dp_step)")
    mean = total.detach().clone()
    dist.all_reduce(mean)
    return mean.item() / dist.get_world_size()


def mesh_groups(dp: int, ep: int):
    """(dp_group, ep_group) of this rank, rank = d * ep + e; every rank creates every group, in the same order."""
    rank = dist.get_rank()
    ep_groups = [dist.new_group([d * ep + e for e in range(ep)]) for d in range(dp)]
    dp_groups = [dist.new_group([d * ep + e for d in range(dp)]) for e in range(ep)]
    return dp_groups[rank % ep], ep_groups[rank // ep]


def main() -> None:
    from labs.common import dist as cdist
    from labs.common.model import build_model

    from .expert_parallel import apply_expert_parallel
    from .moe import apply_moe

    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    env = cdist.init()
    ep = env.world_size // args.dp
    dp_group, ep_group = mesh_groups(args.dp, ep)
    torch.manual_seed(0)  # the same model on every rank
    model = apply_expert_parallel(apply_moe(build_model("tiny"), args.experts, k=2), ep_group).to(env.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(env.rank)  # each rank its own tokens
    for step in range(args.steps):
        x = torch.randint(0, model.cfg.vocab_size, (2, 64), generator=gen).to(env.device)
        loss = ep_dp_step(model, opt, (x, x), dp_group)
        if env.rank == 0:
            print(f"step {step}: loss {loss:.4f}, bias {moe_layers(model)[0].bias.tolist()}")
    cdist.teardown()


if __name__ == "__main__":
    main()
