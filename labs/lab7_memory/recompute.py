# GENERATED from solutions/lab7_memory/recompute.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Activation checkpointing, applied to the model from outside: the model's code does not change.

Full: forward keeps only each Block's input; backward reruns the block's forward to get back what it dropped,
then differentiates. Memory per block falls to the block input alone; compute rises by one forward of the
blocks: forward 1 + backward 2 (units of a forward's FLOPs) becomes 1 + 1 + 2, so a step costs ~4/3 as much.

Selective: forward keeps what is expensive to recompute and cheap to store (a per-op policy, keep_matmuls,
decides) and backward recomputes the rest, so a block keeps more than under full and recomputes less.

Dropout under recomputation: the rerun must draw the same masks, or the gradient is of another network. The
checker compares the loss and every gradient with no recomputation, bit for bit.
"""
from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

aten = torch.ops.aten
# The ops whose outputs selective recomputation keeps: a Linear is one of these (2*m*n*k FLOPs).
KEEP = {aten.mm.default, aten.addmm.default}


def keep_matmuls(ctx, op, *args, **kwargs):
    """The selective policy: save a matmul's output, recompute every other op."""
    raise NotImplementedError("TODO(lab7): The selective policy, asked once per op during forward: the output of an op "
                              "in KEEP (the matmuls, where the FLOPs are: 2*m*n*k each) is kept for backward; every "
                              "other op's output is dropped and recomputed. A block then keeps its input + its four "
                              "Linears' outputs (9h per token) and none of the a*s*s attention tensors. (hints: "
                              "checker hint lab7 recompute.keep_matmuls)")


def _checkpointed(forward, mode: str, *args, **kwargs):
    raise NotImplementedError("TODO(lab7): Returns the block's output while only its input (full), or its input and "
                              "what keep_matmuls saves (selective), stays alive for backward; backward reruns the rest "
                              "once and yields the same loss and gradients as no recomputation, dropout included: the "
                              "rerun must draw the very same masks. Cost: one more forward of the block (a step 4/3 as "
                              "long in FLOPs), no more. (hints: checker hint lab7 recompute.checkpointed)")


def apply_recompute(model: torch.nn.Module, mode: str = "full") -> torch.nn.Module:
    """In place: every block of model.blocks recomputes its activations in backward ("full" or "selective").

    Parameter names and the state_dict are unchanged: each block's forward is wrapped on the instance,
    so checkpoints and optimizers see the same model."""
    if mode not in ("full", "selective"):
        raise ValueError(f"mode must be 'full' or 'selective', not {mode!r}")
    for block in model.blocks:
        block.forward = functools.partial(_checkpointed, block.forward, mode)
    return model
