"""Where the experts go: the smallest expert-parallel degree whose per-rank memory fits a budget.

    python -m solutions.lab10_moe.planner      # gpt2-124m's shape with 8-64 experts on 8 ranks, 16 GiB of state each

Every rank holds the dense weights (attention, norms, embeddings, routers: replicated over all W ranks, each rank
a data-parallel replica) and E/ep of the experts (sharded over the ep ranks of its group, replicated over the dp =
W/ep groups). With fp32 weights, gradients and AdamW's two moments, a parameter held costs 16 B:

    bytes(ep) = 16 * (D + X / ep)        D dense parameters, X = every expert's w1 and w2 in every layer

gpt2-124m's shape with E = 64 experts (f = 4h): D = 124 M - the MLPs' 57 M + routers' 0.6 M = 68 M, X = 64 * 12 *
2 * 768 * 3072 = 3.62 G parameters: 16 * (68 M + 3.62 G) = 59 GB of state per rank at ep = 1, 16 * (68 M + 453 M)
= 8.3 GB at ep = 8.
The smallest ep that fits wins: a larger one only adds all-to-all hops (and with ep = 1, no all-to-all at all), and
ep must divide both E (whole experts per rank) and W (whole ep groups). Activations and the dispatch buffers (up
to C * E/ep rows per layer) come on top: lab 7's planner covers activations; here the state decides.
"""
from __future__ import annotations

import torch

BYTES_PER_PARAM = 16  # fp32 weight + gradient + AdamW's exp_avg and exp_avg_sq


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    """(dense, expert) parameter counts of a one-process model with MoE blocks: expert = every MoE layer's w1 and w2,
    dense = every other parameter, a tied weight counted once."""
    # BEGIN SOLUTION Two integers that add up to the model's unique parameter count: the experts' weights (sharded by
    #                expert parallelism) and everything else (replicated), routers included in the dense part.
    # HINT 1         Which parameters would an EP rank hold a slice of, and which whole? Does a tied weight cost
    #                twice?
    # HINT 2         model.parameters() yields each tensor once; the MoE layers are the modules with w1 and w2.
    # HINT 3         expert = sum(m.w1.numel() + m.w2.numel() for m in moe_layers(model)); dense = sum(p.numel() for p
    #                in model.parameters()) - expert.
    from .moe import moe_layers

    expert = sum(m.w1.numel() + m.w2.numel() for m in moe_layers(model))
    return sum(p.numel() for p in model.parameters()) - expert, expert
    # END SOLUTION


def plan_experts(dense: int, expert: int, n_experts: int, world: int, budget_bytes: int,
                 bytes_per_param: int = BYTES_PER_PARAM) -> dict:
    """{"ep", "dp", "experts_per_rank", "bytes", "fits", "bytes_by_ep"}: the smallest ep dividing both n_experts
    and world whose per-rank bytes fit the budget; bytes_by_ep holds the per-rank bytes of every such ep. None fits:
    the largest ep, fits False."""
    # BEGIN SOLUTION bytes_by_ep maps every ep that splits both the experts and the ranks evenly (ascending) to
    #                the bytes of model state one rank holds at that ep (bytes_per_param for each parameter it
    #                holds), an integer; the plan is the smallest ep within budget_bytes (none is: the largest, fits
    #                False), with the dp and the experts a rank that this ep leaves.
    # HINT 1         Which ranks hold a given expert, and which hold a given dense weight? Why must ep divide E, and
    #                why W? Why prefer the smallest ep that fits?
    # HINT 2         The candidates are the common divisors, ascending; the per-rank parameters are dense + expert /
    #                ep (expert / ep is whole: ep divides E and each expert has the same size).
    # HINT 3         eps = [e for e in range(1, world + 1) if world % e == 0 and n_experts % e == 0]; by = {e:
    #                bytes_per_param * (dense + expert // e) for e in eps}; ep = next((e for e in eps if by[e] <=
    #                budget_bytes), eps[-1]); return {"ep": ep, "dp": world // ep, "experts_per_rank": n_experts //
    #                ep, "bytes": by[ep], "fits": by[ep] <= budget_bytes, "bytes_by_ep": by}.
    eps = [e for e in range(1, world + 1) if world % e == 0 and n_experts % e == 0]
    by = {e: bytes_per_param * (dense + expert // e) for e in eps}
    ep = next((e for e in eps if by[e] <= budget_bytes), eps[-1])
    return {"ep": ep, "dp": world // ep, "experts_per_rank": n_experts // ep, "bytes": by[ep],
            "fits": by[ep] <= budget_bytes, "bytes_by_ep": by}
    # END SOLUTION


def main() -> None:
    from labs.common.model import build_model

    from .moe import apply_moe

    world, budget = 8, 16 * 2 ** 30  # what is left of an 80 GB GPU after activations, say
    for n_experts in (8, 16, 32, 64):
        with torch.device("meta"):  # shapes only: no memory
            dense, expert = count_params(apply_moe(build_model("gpt2-124m"), n_experts, k=2))
        p = plan_experts(dense, expert, n_experts, world, budget)
        table = ", ".join(f"ep {e}: {b / 2 ** 30:.1f} GiB" for e, b in p["bytes_by_ep"].items())
        print(f"E={n_experts:2d}: dense {dense / 1e6:.0f} M, experts {expert / 1e6:,.0f} M -> ep {p['ep']} x dp "
              f"{p['dp']} ({p['experts_per_rank']} experts a rank, fits {p['fits']}); {table}")


if __name__ == "__main__":
    main()
