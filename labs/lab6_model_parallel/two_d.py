# GENERATED from solutions/lab6_model_parallel/two_d.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Optional: 2-D parallelism, FSDP2 x tensor parallelism on a 2 x 2 mesh (4 ranks), with the tiny model.

    torchrun --nproc_per_node 4 -m labs.lab6_model_parallel.two_d --steps 4

The mesh ("dp", "tp") = (2, 2) puts ranks {0, 1} and {2, 3} in TP groups and {0, 2}, {1, 3} in DP groups:
    tp   the two ranks of a TP group see the same batch and split every block's layers (parallelize_dtensor);
         their all-reduces run twice per block per pass, so on a real cluster a TP group stays inside one
         node (NVLink, ~450 GB/s), never across the network
    dp   the TP groups see different batches; FSDP2 shards each TP shard again over dp and reduce-scatters
         the gradients once per step, traffic that tolerates the slower links between nodes
Bytes per rank: the split layers' weights are cut 4 ways (1/tp by TP, then 1/dp by FSDP); the rest
(embeddings, LayerNorms, row-parallel biases) 2 ways, by FSDP alone.
The script checks itself: every step's loss (the mean over the DP groups) against one process on the
global batch, with SGD (AdamW would turn rounding in near-zero gradients into lr-sized steps).
"""
from __future__ import annotations

import argparse
import dataclasses

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model, get_config

from .tp_dtensor import parallelize_dtensor


def apply_2d(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """In place: tensor parallel within mesh["tp"], FSDP2 over mesh["dp"]; returns the model."""
    raise NotImplementedError("TODO(lab6): In place, returns the model. Within each TP group (the ranks of one "
                              "mesh['tp'], which see the same batch) every block is split as your parallelize_dtensor "
                              "splits it; across the DP groups each rank's TP shard is sharded again, so a rank holds "
                              "1/(tp x dp) of every split layer's weights and 1/dp of everything else (2 x 2: 1/4 and "
                              "1/2), a block's weights gathered whole over dp only while that block runs. Loss and "
                              "update match one process on the global batch (the script checks itself; not graded). "
                              "(hints: checker hint lab6 two_d.apply_2d)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=4, help="sequences per DP group per step")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    env = cdist.init(args.device)
    from torch.distributed.device_mesh import init_device_mesh

    dp = env.world_size // args.tp
    mesh = init_device_mesh(env.device.type, (dp, args.tp), mesh_dim_names=("dp", "tp"))
    cfg = dataclasses.replace(get_config("tiny"), dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg).to(env.device)
    ref = build_model(cfg).to(env.device)
    ref.load_state_dict(model.state_dict())
    apply_2d(model, mesh)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    data, dp_rank, b = TokenFile.open(ensure_corpus(cfg.vocab_size)), mesh["dp"].get_local_rank(), args.batch_size
    held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    total = sum(p.numel() for p in ref.parameters())
    cdist.log(env, f"mesh dp={dp} x tp={args.tp}; rank 0 holds {held:,} of {total:,} parameters ({held / total:.0%})")
    worst = 0.0
    for step in range(args.steps):
        ids = range(step * b * dp, (step + 1) * b * dp)  # the global batch; DP group g takes block g
        x, y = data.batch(list(ids)[dp_rank * b:(dp_rank + 1) * b], cfg.block_size, env.device)
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=mesh["dp"].get_group())
        mean /= dp
        ref_opt.zero_grad(set_to_none=True)
        _, ref_loss = ref(*data.batch(list(ids), cfg.block_size, env.device))
        ref_loss.backward()
        ref_opt.step()
        worst = max(worst, abs(mean.item() - ref_loss.item()))
        cdist.log(env, f"step {step + 1}: loss {mean.item():.6f}, one process {ref_loss.item():.6f}")
    cdist.log(env, f"largest loss difference from one process: {worst:.1e}")
    cdist.teardown()


if __name__ == "__main__":
    main()
