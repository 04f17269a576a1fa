"""Lab 10's runs: their shapes (cases, layer and mesh sizes, the seed), read by both sides: the worker's tasks take
them as defaults, the parent's plan moves them for hidden variants and counts the ranks each run takes."""
from __future__ import annotations

SEED = 10
# (tokens, experts, k): tokens not a multiple of experts; row 0 of each case ties every expert, row 1 ties two;
# every case but the first routes with a selection bias
ROUTER_CASES = [(40, 6, 2), (33, 8, 3), (17, 4, 1)]
# (tokens, k, experts, factor) for capacity(); exact binary fractions, so ceil() sees no rounding error
CAPACITY_CASES = [(96, 2, 8, 1.0), (100, 2, 8, 1.25), (33, 3, 7, 1.5), (64, 1, 4, 0.5), (10, 2, 6, 0.75)]
MOE = dict(hidden=16, experts=6, k=2, ffn=24, factor=1.0, batch=2, seq=21)  # 42 tokens: some choices dropped
BALANCE = dict(hidden=16, experts=8, k=2, tokens=256, steps=80, gamma=0.005, skew=1.0)
EP = dict(hidden=16, k=2, ffn=24, factor=1.0, tokens=30, per_rank_experts=2)
EPDP = dict(dp=2, ep=2, experts=4, k=2, factor=1.0, batch=2, lr=0.1, aux_coef=0.05, gamma=0.01)
RESUME = dict(experts=4, k=2, factor=1.0, batch=2, steps=8, save_at=4, lr=3e-3, aux_coef=0.01, gamma=0.01)
