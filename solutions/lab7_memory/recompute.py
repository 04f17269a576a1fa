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
    # BEGIN SOLUTION The selective policy, asked once per op during forward: the output of an op in KEEP (the
    #                matmuls, where the FLOPs are: 2*m*n*k each) is kept for backward; every other op's output is
    #                dropped and recomputed. A block then keeps its input + its four Linears' outputs (9h per token)
    #                and none of the a*s*s attention tensors.
    # HINT 1         Keep what is expensive to recompute and cheap to store; recompute the rest. Ask: which ops of a
    #                block carry nearly all its FLOPs, and which produce the largest tensors for the least work?
    # HINT 2         Return a CheckpointPolicy member; `op` arrives as an aten overload, comparable with KEEP's.
    # HINT 3         return CheckpointPolicy.MUST_SAVE if op in KEEP else CheckpointPolicy.PREFER_RECOMPUTE.
    return CheckpointPolicy.MUST_SAVE if op in KEEP else CheckpointPolicy.PREFER_RECOMPUTE
    # END SOLUTION


def _checkpointed(forward, mode: str, *args, **kwargs):
    # BEGIN SOLUTION Returns the block's output while only its input (full), or its input and what keep_matmuls
    #                saves (selective), stays alive for backward; backward reruns the rest once and yields the same
    #                loss and gradients as no recomputation, dropout included: the rerun must draw the very same
    #                masks. Cost: one more forward of the block (a step 4/3 as long in FLOPs), no more.
    # HINT 1         Recomputation trades memory for one extra forward, run inside backward. Ask: what must the rerun
    #                reproduce exactly for the gradient to be of the same network (the random state the dropout
    #                masks came from), and what would make it cost more than one forward?
    # HINT 2         torch.utils.checkpoint's checkpoint, non-reentrant, preserving the RNG state; selective passes
    #                a context_fn built from create_selective_checkpoint_contexts and keep_matmuls.
    # HINT 3         context = {}; if mode == "selective": context["context_fn"] = functools.partial(
    #                create_selective_checkpoint_contexts, keep_matmuls); return checkpoint of forward on args,
    #                non-reentrant (use_reentrant=False), RNG preserved (preserve_rng_state=True), with context
    #                and kwargs passed on.
    # Full keeps 4 bsh per block (fp32) instead of 72 bsh + 12 abs^2 + 16 bs (fp32, dropout on). Selective keeps
    # the outputs of the matmuls (mm/addmm: the Linear layers, where the FLOPs are) and recomputes everything else:
    # LayerNorms, the attention core (QK^T, softmax, dropout, times V: the a*s^2 tensors), GELU, dropout. It keeps
    # 4 bsh + 9 bsh in the matmul dtype and recomputes about 4*b*s^2*h attention FLOPs per block of the
    # 24*b*s*h^2 + 4*b*s^2*h in its forward. preserve_rng_state=True saves the RNG state at the start of forward and
    # restores it for the rerun; every random op is rerun (none is saved), so they consume the generator in the
    # same order.
    context = {}
    if mode == "selective":
        context["context_fn"] = functools.partial(create_selective_checkpoint_contexts, keep_matmuls)
    return checkpoint(forward, *args, use_reentrant=False, preserve_rng_state=True, **context, **kwargs)
    # END SOLUTION


def apply_recompute(model: torch.nn.Module, mode: str = "full") -> torch.nn.Module:
    """In place: every block of model.blocks recomputes its activations in backward ("full" or "selective").

    Parameter names and the state_dict are unchanged: each block's forward is wrapped on the instance,
    so checkpoints and optimizers see the same model."""
    if mode not in ("full", "selective"):
        raise ValueError(f"mode must be 'full' or 'selective', not {mode!r}")
    for block in model.blocks:
        block.forward = functools.partial(_checkpointed, block.forward, mode)
    return model
