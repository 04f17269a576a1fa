# GENERATED from solutions/lab8_multinode/train.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""One rank of the two-node job: join, check the layout, train a few HSDP (or FSDP) steps, print the bytes.

    torchrun <torchrun_args for this node> -m labs.lab8_multinode.train --strategy hsdp --steps 6
    python -m labs.lab8_multinode.nodes        # starts both nodes' torchrun for you
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model, get_config

from .elastic import resume, save_checkpoint
from .hsdp import make_mesh, shard_model
from .launch import check_layout, pick_interface


def link_bytes(ifname: str) -> int | None:
    base = f"/sys/class/net/{ifname}/statistics"
    if ifname == "lo" or not os.path.exists(base):
        return None
    return sum(int(open(f"{base}/{k}_bytes").read()) for k in ("tx", "rx"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategy", choices=["fsdp", "hsdp"], default="hsdp")
    ap.add_argument("--steps", type=int, default=6)
    # nodes.py passes cpu: its two "nodes" share one machine, where NCCL would find its GPUs by shared memory and
    # never use the veth. On a cluster (train.sbatch) auto takes the GPUs: NCCL across nodes, on the interface below.
    ap.add_argument("--device", choices=cdist.DEVICE_CHOICES, default="auto")
    ap.add_argument("--ckpt", help="a folder on storage every node sees: resume from it, checkpoint every 5 steps "
                                   "(a restarted job continues instead of starting over)")
    args = ap.parse_args(argv)
    ifname = pick_interface(os.environ["MASTER_ADDR"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", ifname)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", ifname)
    env = cdist.init(args.device, timeout_s=60)
    nnodes = env.world_size // int(os.environ["LOCAL_WORLD_SIZE"])
    layout = check_layout(nnodes, int(os.environ["LOCAL_WORLD_SIZE"]))
    cdist.log(env, f"world {layout['world']}, nodes {layout['nodes']}, gloo on {layout['ifname']}")
    torch.manual_seed(0)
    model = build_model(get_config("tiny")).to(env.device)
    from torch.distributed.device_mesh import init_device_mesh
    kind = env.device.type
    mesh = make_mesh(nnodes, env.world_size // nnodes, kind) if args.strategy == "hsdp" else \
        init_device_mesh(kind, (env.world_size,))
    model = shard_model(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TokenFile.open(ensure_corpus(256))
    before, t0 = None, 0.0
    start = resume(args.ckpt, model, opt) + 1 if args.ckpt else 1
    if start > 1:
        cdist.log(env, f"resumed from step {start - 1} (restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)})")
    for step in range(start, args.steps + 1):
        if step == 2:  # step 1 includes lazy initialisation's own traffic
            dist.barrier()
            before, t0 = link_bytes(os.environ["GLOO_SOCKET_IFNAME"]), time.perf_counter()
        first = (step * env.world_size + env.rank) * 4
        x, y = data.batch(list(range(first, first + 4)), 64, env.device)
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        cdist.log(env, f"step {step} loss {loss.item():.4f}")
        if args.ckpt and step % 5 == 0:
            save_checkpoint(args.ckpt, model, opt, step)
    dist.barrier()
    after, dt = link_bytes(os.environ["GLOO_SOCKET_IFNAME"]), time.perf_counter() - t0
    if before is not None and after is not None and env.local_rank == 0:
        cdist.log(env, f"{args.strategy}: {(after - before) / (args.steps - 1) / 1e3:.1f} kB per step across "
                       f"the link, {dt / (args.steps - 1) * 1e3:.0f} ms per step", all_ranks=True)
    cdist.teardown()


if __name__ == "__main__":
    main()
