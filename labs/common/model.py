"""A small GPT: pre-LayerNorm decoder, causal self-attention, tied embeddings.

The model knows nothing of ranks, devices or parallelism. Every lab applies its
parallelism from the outside (a wrapper, a hook, `fully_shard`, a plan), so this
file is the same for one process and for a thousand.

Parameter count, ignoring biases and LayerNorms (d = n_embd, L = n_layer, V = vocab):
    embeddings  V*d + T*d          (the output head is tied to the token embedding)
    per block   4*d*d (attention: q, k, v, proj) + 8*d*d (MLP: d -> 4d -> d) = 12*d*d
    total       ~ 12*L*d*d + V*d
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int  # longest sequence the position embedding covers
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float = 0.0
    tie_embeddings: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


# Named configs. `tiny` keeps dropout on so that exact resume needs the RNG state,
# not just the weights: a checkpoint that forgets it diverges at the first step.
CONFIGS: dict[str, GPTConfig] = {
    # ~0.12 M params: tests and the checker; a training step takes milliseconds on one core.
    "tiny": GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=64, dropout=0.1),
    # ~12 M params: a laptop lab that shows real numbers in a few minutes.
    "small": GPTConfig(vocab_size=4096, block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.1),
    # GPT-2 small shape (124 M), for GPU nodes. Vocab padded to a multiple of 64 for fast matmuls.
    "gpt2-124m": GPTConfig(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768, dropout=0.0),
}


def get_config(name: str) -> GPTConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model config {name!r}; choose one of {sorted(CONFIGS)}") from None


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must divide evenly into heads"
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, heads, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LN residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        # A ModuleList of identical blocks: the unit later labs wrap (FSDP) or split (pipeline).
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(2L) so the residual stream's
        # variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx, targets: (B, T) int64. Returns logits (B, T, V) and the mean cross-entropy (or None)."""
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def count_params(model: nn.Module) -> int:
    """Unique parameters (a tied weight counts once, as it is stored once)."""
    return sum(p.numel() for p in model.parameters())


def build_model(config: str | GPTConfig) -> GPT:
    """Build on the CPU with the current torch RNG; the caller moves it to its device."""
    cfg = get_config(config) if isinstance(config, str) else config
    return GPT(cfg)
