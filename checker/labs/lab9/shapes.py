"""Lab 9's runs: their shapes (cases, sizes, the seed) and the resume job's, read by both sides: the worker's tasks
take them as defaults, the parent's plan moves them for hidden variants and counts the ranks each run takes."""
from __future__ import annotations

SEED = 9
# (batch, heads, seq, head_dim, causal, block_q, block_k): seq odd, so no tile size divides it; a hidden variant
# lengthens every seq by an even amount (plan.grade()).
FLASH_CASES = [(2, 2, 37, 16, False, 16, 16), (1, 3, 50 - 1, 8, True, 16, 8), (2, 1, 29, 8, True, 8, 16)]
MEM_SHAPE = (1, 2, 256, 16, 32)  # (b, h, s, d, tile): s*s = 16x s*d, so a kept s x s tensor stands out
RING = dict(heads=2, head_dim=8, chunk=7, block=4, balance_chunk=8)  # chunk: s = 2N*chunk; block ∤ 2*chunk
ULYSSES = dict(head_dim=8, rows=5)  # heads = 2N, s = N*rows
CP = dict(dp=2, cp=2, batch=4, lr=0.1)  # 4 ranks: 2 dp groups of 2 cp ranks; tiny's whole 64-token windows
# The resume check's CP x DP job (resume.py): hidden variants move save_at, kill_at
RESUME = dict(dp=2, cp=2, batch=4, warmup=2, save_at=3, kill_at=5, steps=8)
KILL = "cp_killme"  # the cue file: the harness kills the run when it appears
