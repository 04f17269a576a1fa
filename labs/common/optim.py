"""The optimizer and learning-rate schedule every lab uses, so runs compare like with like.

AdamW keeps two fp32 moments per parameter (exp_avg, exp_avg_sq: 8 bytes) plus one 4-byte
`step` tensor per parameter tensor; with 4-byte weights and 4-byte grads that is the
16 bytes/parameter of model state that lab 3 shards.
"""
from __future__ import annotations

import math

import torch

ADAMW = {"betas": (0.9, 0.95), "foreach": None}
# foreach=None: torch decides by device. On a GPU, the multi-tensor (foreach) kernels: one launch per group of
# tensors instead of ~10 per parameter tensor (the tiny model's 28 tensors: ~280 launches of ~5 us each, more
# than its whole forward). On CPU, the per-parameter loop: bit-for-bit the same whatever the tensors' layout,
# which keeps sharded and unsharded runs (labs 2-3) comparable to the last bit. Every caller (make_optimizer,
# a ZeRO-1 over shards) passes the same dict, so both sides of a comparison pick the same path on one device.


def param_groups(model: torch.nn.Module, weight_decay: float = 0.1) -> list[dict]:
    """Weight decay only on matrices (embeddings, linear weights), not on biases or LayerNorms."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, lr: float = 3e-3, weight_decay: float = 0.1) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, **ADAMW)


def make_scheduler(optimizer: torch.optim.Optimizer, warmup: int, total: int, min_ratio: float = 0.1):
    """Linear warm-up for `warmup` steps, then cosine decay to min_ratio*lr at `total`.

    A LambdaLR's state is just its step count, so it checkpoints and resumes exactly.
    """
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
