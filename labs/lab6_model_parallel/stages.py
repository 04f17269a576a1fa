# GENERATED from solutions/lab6_model_parallel/stages.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Pipeline stages cut from the GPT: each rank keeps a contiguous run of blocks and nothing else.

    torchrun --nproc_per_node 2 -m labs.lab6_model_parallel.pp_timeline --out runs/lab6/pp.json

The p stages hold the model's L blocks in the model's order, each stage a contiguous run of L/p of them;
the first stage also the embeddings, the last the final LayerNorm and the head. One tensor crosses each
cut: the residual stream, (micro_batch, T, d) floats (tiny, micro-batch 2: 2*64*64*4 = 32 KB forward, the
same bytes of gradient backward), far less than the blocks' weights (tiny: 50 K floats per block), which
never move. That is pipeline parallelism's
deal: little communication, but idle stages (the bubble) unless micro-batches keep them busy.

Tied weights. The GPT's head reuses the token embedding (tie_embeddings): one Parameter, two uses. Cut
in two, the first stage's copy sees only the embedding's gradient and the last stage's only the head's;
the model's gradient is their sum. So after backward, and before the optimizer step, both copies must hold
that sum (V*d floats: tiny 16 K), and the copies stay equal.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn


class GPTStage(nn.Module):
    """A slice of the GPT: token ids (first stage) or the residual stream in; the residual stream or
    logits (last stage) out. Holds the model's own modules, not copies."""

    def __init__(self, model: nn.Module, blocks: range, first: bool, last: bool, tied_group=None):
        super().__init__()
        self.first, self.last = first, last
        self.blocks = nn.ModuleList(model.blocks[i] for i in blocks)
        if first:
            self.tok_emb, self.pos_emb, self.drop = model.tok_emb, model.pos_emb, model.drop
        if last:
            self.ln_f, self.head = model.ln_f, model.head
        # the tied weight, on the first or the last stage; a middle stage, or one stage holding both, has none
        tied = model.cfg.tie_embeddings and first != last
        self.tied = (self.tok_emb.weight if first else self.head.weight) if tied else None
        self.tied_group = tied_group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("TODO(lab6): Returns exactly this stage's part of the GPT's forward, with the "
                                  "model's own modules: the first stage takes token ids (B, T) and the others the "
                                  "residual stream (B, T, d); the last returns logits (B, T, V) and the others the "
                                  "residual stream. Chained over the stages, each output into the next, it gives the "
                                  "whole model's logits (without the loss), as GPT.forward computes them. (hints: "
                                  "checker hint lab6 stages.forward)")


def split_stages(model: nn.Module, stage: int, n_stages: int) -> GPTStage:
    """This rank's stage: its run of blocks, plus the embeddings on the first stage and the final LayerNorm and
    head on the last. Every rank must call it (it creates the tied-weight group)."""
    n_layer = len(model.blocks)
    if n_layer % n_stages:
        raise ValueError(f"{n_stages} stages must divide the {n_layer} blocks")
    # new_group is collective: every rank creates it, only members use it. With two stages it is the world.
    group = None
    if dist.is_initialized() and n_stages > 2:
        group = dist.new_group([0, n_stages - 1])
    raise NotImplementedError("TODO(lab6): Returns stage `stage` of n: the n stages hold the model's blocks in the "
                              "model's order, each a contiguous run of L/n blocks, stage 0 the first run, each block "
                              "on exactly one stage (the checker chains the stages of a 4-layer GPT and compares the "
                              "logits); the first stage also holds the embeddings, the last the final LayerNorm and "
                              "head, and the stage keeps the tied-weight group made above. Tiny (L = 2) in 2 stages: "
                              "block 0, then block 1. (hints: checker hint lab6 stages.split_stages)")


def sync_tied_grads(stage: nn.Module) -> None:
    """After backward, on every rank: the first and last stages both end holding the model's gradient of the tied
    embedding/head weight. Other stages (and untied models) do nothing."""
    tied = getattr(stage, "tied", None)
    if tied is None:
        return
    raise NotImplementedError("TODO(lab6): Afterwards the first and the last stage hold the same gradient for the tied "
                              "embedding/head weight, the whole model's: dL/dW = the embedding's part + the head's "
                              "part, V*d floats (tiny: 16 K). It must hold also when a copy got no gradient in this "
                              "backward (its .grad is None). Only those two stages take part: the group kept in "
                              "stage.tied_group holds them (None: the world is just the two). (hints: checker hint "
                              "lab6 stages.sync_tied_grads)")
