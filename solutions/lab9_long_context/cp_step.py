"""Context parallelism x data parallelism: a training step of the course GPT with its sequence split over ranks.

    torchrun --nproc_per_node 4 -m solutions.lab9_long_context.cp_step     # mesh (dp=2, cp=2); checks itself
    torchrun --nproc_per_node 2 -m solutions.lab9_long_context.cp_step --dp 1

A 2-D mesh ("dp", "cp"): the ranks of a cp group hold the same sequences, each s/cp of their tokens (zig-zag
chunks); the dp groups hold different sequences. Everything in a block but attention works token by token, so it
runs on a rank's own tokens unchanged; attention runs as ring_attention over the cp group (_cp_attention). The
model (labs/common/model.py) is not edited: apply_context_parallel changes what these instances compute, from
outside, as lab 7 applied recomputation from outside. Besides attention, the model assumes one thing that stops
being true once a rank holds only some of a sequence's tokens: where in the sequence they sit.

The loss of a rank is the mean over its own tokens, and every rank holds as many tokens. The step must still be
one process's step on the global batch: every rank's gradient equal to the gradient of the global batch's mean
loss (once the ring has sent every K/V gradient home, a rank's parameter gradient holds its own tokens'
contribution only). Which ranks' gradients must be combined, and how, is cp_dp_step's to derive. Bytes per
step: the ring's per layer (ring.py), plus what combining the gradients costs over the ranks you find must meet
(lab 2's arithmetic).
"""
from __future__ import annotations

import argparse
import dataclasses

import torch
import torch.distributed as dist

from .ring import ring_attention
from .zigzag import positions, zigzag_shard


def _cp_attention(attn, group, layout, x):
    """CausalSelfAttention.forward (labs/common/model.py) with ring attention over `group` in place of SDPA."""
    B, T, C = x.shape
    q, k, v = attn.qkv(x).split(C, dim=2)
    q, k, v = (t.view(B, T, attn.n_head, C // attn.n_head).transpose(1, 2).contiguous() for t in (q, k, v))
    y = ring_attention(q, k, v, causal=True, layout=layout, group=group)
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return attn.resid_drop(attn.proj(y))


def apply_context_parallel(model: torch.nn.Module, group, seq_len: int, layout: str = "zigzag") -> torch.nn.Module:
    """In place: every block's attention runs as ring attention over `group`, and the position embedding embeds this
    rank's global positions (under `layout`) of a sequence of seq_len. Parameters and names unchanged."""
    if model.cfg.dropout:
        raise ValueError("context parallelism here needs dropout 0 (attention dropout would need the ring's RNG)")
    # BEGIN SOLUTION In place, on these instances, the model's code and parameters untouched: every block's attention
    #                computes what _cp_attention computes (the ring over group, under layout), and the embedding of
    #                this rank's i-th token is that of the token's GLOBAL position in the sequence of seq_len (under
    #                the layout: contiguous rows or zig-zag chunks), whatever local positions the model asks for. With
    #                local positions every rank would embed its first token as position 0 and the loss would be
    #                another network's. The checker compares one step with one process's on the global batch.
    # HINT 1         The model calls each block's attention and asks for positions 0..T-1 of the tokens it sees. Which
    #                positions do this rank's T tokens really have, and where can you change what a module instance
    #                computes without touching its class?
    # HINT 2         An instance's forward attribute shadows its class's: set each block.attn.forward to _cp_attention
    #                with the attention, group and layout bound (functools.partial); zigzag.positions gives this rank's
    #                global positions; wrap the position embedding's forward on its instance so it looks them up.
    # HINT 3         for block in model.blocks: block.attn.forward = functools.partial(_cp_attention, block.attn, group,
    #                layout); rank, world = rank and size of group; glob = positions(seq_len, rank, world, layout,
    #                device); orig = model.pos_emb.forward; model.pos_emb.forward = lambda pos: orig(glob[pos]).
    import functools

    for block in model.blocks:
        block.attn.forward = functools.partial(_cp_attention, block.attn, group, layout)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    glob = positions(seq_len, rank, world, layout, model.pos_emb.weight.device)
    embed = model.pos_emb.forward
    model.pos_emb.forward = lambda pos: embed(glob[pos])
    # END SOLUTION
    return model


def shard_batch(x: torch.Tensor, y: torch.Tensor, mesh, layout: str = "zigzag"):
    """This rank's part of a global batch (B, s): its dp group's sequences, its cp rank's tokens of each."""
    dp, cp = mesh.get_group("dp"), mesh.get_group("cp")
    rows = x.shape[0] // dist.get_world_size(dp)
    d, c, n = dist.get_rank(dp), dist.get_rank(cp), dist.get_world_size(cp)
    x, y = x[d * rows:(d + 1) * rows], y[d * rows:(d + 1) * rows]
    # (zigzag.positions and this split must agree: it is the layout apply_context_parallel was given)
    if layout == "zigzag":
        return zigzag_shard(x, c, n, 1), zigzag_shard(y, c, n, 1)
    s = x.shape[1] // n
    return x[:, c * s:(c + 1) * s], y[:, c * s:(c + 1) * s]


def cp_dp_step(model: torch.nn.Module, optimizer, batch, group=None) -> float:
    """One step on this rank's tokens (shard_batch); `group`: every rank of the dp x cp mesh (None: the world).
    Afterwards every rank's .grad and parameters equal one process's step on the global batch. Returns the global
    batch's mean loss."""
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    # BEGIN SOLUTION Every rank's .grad equals the gradient of the global batch's mean loss (every sequence of every
    #                dp group, every token of every cp rank), so the update is one process's, to 2e-5; the loss
    #                returned is that global mean. What you have to start from: each rank's loss is the mean over its
    #                own tokens, and every rank holds as many tokens.
    # HINT 1         Each rank's gradient is its own tokens' share of the mean. Over which ranks must the shares be
    #                combined (those that hold other tokens of the same sequences, and those with other sequences),
    #                and is it a sum or an average?
    # HINT 2         One collective over the whole mesh (`group`: both dims) per gradient, averaging; the same for the
    #                loss.
    # HINT 3         world = dist.get_world_size(group); for p in model.parameters(): dist.all_reduce(p.grad,
    #                group=group); p.grad /= world. loss = loss.detach().clone(); all-reduce it too; loss /= world.
    world = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= world
    loss = loss.detach().clone()
    dist.all_reduce(loss, group=group)
    loss /= world
    # END SOLUTION
    optimizer.step()
    return loss.item()


def main(argv=None) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from labs.common import dist as cdist
    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.model import build_model, get_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layout", default="zigzag")
    args = ap.parse_args(argv)
    env = cdist.init(timeout_s=60)
    mesh = init_device_mesh(env.device.type, (args.dp, env.world_size // args.dp), mesh_dim_names=("dp", "cp"))
    cfg = dataclasses.replace(get_config("tiny"), dropout=0.0)
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    models = []
    for _ in range(2):  # the same weights: one to shard, one to run whole on the global batch
        torch.manual_seed(0)
        models.append(build_model(cfg).to(env.device))
    cp, ref = models
    apply_context_parallel(cp, mesh.get_group("cp"), cfg.block_size, args.layout)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    for step in range(args.steps):
        x, y = data.batch(list(range(step * 4, step * 4 + 4)), cfg.block_size, env.device)
        loss = cp_dp_step(cp, opts[0], shard_batch(x, y, mesh, args.layout))
        opts[1].zero_grad()
        want = ref(x, y)[1]
        want.backward()
        opts[1].step()
        diff = max((a - b).abs().max().item() for a, b in zip(cp.parameters(), ref.parameters()))
        cdist.log(env, f"step {step + 1}: loss {loss:.6f} (one process {want.item():.6f}); "
                       f"max |weight diff| {diff:.1e}")
    cdist.teardown()


if __name__ == "__main__":
    main()
