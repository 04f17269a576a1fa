# GENERATED from solutions/lab10_moe/moe.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""A mixture-of-experts layer for the course GPT, on one process: router, capacity, E expert MLPs, combine.

    python -m labs.lab10_moe.moe          # the tiny GPT with MoE blocks: parameters total vs active

Each block's MLP (h -> 4h -> h) becomes E experts of the same shape and a router; a token runs through k of them.
Parameters grow E-fold, the FLOPs per token only k-fold: with E = 8, k = 2 on gpt2-124m's shape, the MLPs'
2 * 4h^2 = 4.7 M weights per block become 37.7 M (+ the router's 8h) while each token's forward costs 2 * 2 * 4.7 M
FLOPs in them instead of 2 * 4.7 M: 4x the parameters for 2x the MLP compute. MFU counted against total
parameters (6 N per token) would overstate the work 4x on those layers: count the ACTIVE parameters.

The experts are stored as two batched weights, w1 (E, h, f) and w2 (E, f, h), so an expert's work is one matmul
over all the tokens it received (grouped), never a Python loop over tokens. No biases: an MLP bias would be paid
by every token, dropped or not, and the course's EP layer would have to route it too.

apply_moe swaps the MLPs from outside (the model, labs/common/model.py, is not edited): Block.forward computes
x + self.mlp(self.ln2(x)), so any module from (B, T, h) to (B, T, h) fits. The layer keeps its auxiliary loss
of the last forward in .aux_loss and its tokens per expert in .counts (ep_step.py sums and updates from them).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .capacity import capacity, keep_mask
from .router import load_balancing_loss, route


def expert_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert on the rows it received: (n, h) -> (n, h)."""
    return F.gelu(x @ w1) @ w2


class MoE(nn.Module):
    """router.weight (E, h), w1 (E, h, f), w2 (E, f, h), buffer bias (E,): selection bias (update_bias)."""

    def __init__(self, hidden: int, n_experts: int, k: int = 2, ffn: int | None = None,
                 capacity_factor: float = 1.25):
        super().__init__()
        if not 1 <= k <= n_experts:
            raise ValueError(f"top-{k} of {n_experts} experts")
        ffn = ffn or 4 * hidden
        self.n_experts, self.k, self.capacity_factor = n_experts, k, capacity_factor
        self.router = nn.Linear(hidden, n_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(n_experts, hidden, ffn) * 0.02)
        self.w2 = nn.Parameter(torch.randn(n_experts, ffn, hidden) * 0.02)
        self.register_buffer("bias", torch.zeros(n_experts))  # state: saved and loaded with the model
        self.aux_loss = torch.zeros(())
        self.counts = torch.zeros(n_experts, dtype=torch.long)

    def gate(self, xt: torch.Tensor):
        """Route this rank's tokens xt (T, h): (ids, weights, keep), and the aux loss and counts kept on self."""
        scores = self.router(xt)
        ids, w = route(scores, self.k, self.bias)
        self.aux_loss = load_balancing_loss(torch.softmax(scores.float(), -1), ids, self.n_experts)
        self.counts = torch.bincount(ids.flatten(), minlength=self.n_experts)
        keep = keep_mask(ids, self.n_experts, capacity(xt.shape[0], self.k, self.n_experts, self.capacity_factor))
        return ids, w, keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xt = x.reshape(-1, x.shape[-1])
        ids, w, keep = self.gate(xt)
        raise NotImplementedError("TODO(lab10): out[t] = sum over the KEPT choices j of token t of weights[t, j] * "
                                  "expert ids[t, j] applied to xt[t]; dropped choices add nothing (the block's "
                                  "residual carries the token). Each expert runs once on all of its rows (grouped); "
                                  "gradients reach x, w1, w2 and the router. (hints: checker hint lab10 moe.forward)")


def apply_moe(model: nn.Module, n_experts: int, k: int = 2, capacity_factor: float = 1.25) -> nn.Module:
    """In place: every block's MLP becomes MoE(n_embd, n_experts, k, 4 n_embd, capacity_factor)."""
    for block in model.blocks:
        block.mlp = MoE(model.cfg.n_embd, n_experts, k, 4 * model.cfg.n_embd, capacity_factor).to(
            block.ln2.weight.device)
    return model


def moe_layers(model: nn.Module) -> list[nn.Module]:
    """The model's MoE layers (any module with a router and an aux_loss: the EP layer too), in order."""
    return [m for m in model.modules() if hasattr(m, "router") and hasattr(m, "aux_loss")]


def active_params(model: nn.Module) -> tuple[int, int]:
    """(total, active per token) parameter counts: an MoE layer's experts count k/E of their weights as active."""
    total = sum(p.numel() for p in model.parameters())
    idle = sum((m.w1.numel() + m.w2.numel()) * (1 - m.k / m.n_experts) for m in moe_layers(model))
    return total, int(total - idle)


def main() -> None:
    from labs.common.model import build_model

    torch.manual_seed(0)
    model = apply_moe(build_model("tiny"), n_experts=8, k=2)
    total, active = active_params(model)
    x = torch.randint(0, model.cfg.vocab_size, (4, 64))
    _, loss = model(x, x)
    aux = sum(m.aux_loss for m in moe_layers(model))
    print(f"tiny GPT, 8 experts top-2: {total:,} parameters, {active:,} active per token; loss {loss.item():.3f}, "
          f"aux {aux.item():.3f} ({len(moe_layers(model))} layers, 1.0 each when balanced)")


if __name__ == "__main__":
    main()
