"""Lab 2: lab 1's training, data-parallel. Needs torchrun, even for one rank.

    torchrun --nproc_per_node 2 -m solutions.lab2_ddp.train --ddp bucketed --steps 200 --out runs/lab2
    torchrun --nproc_per_node 2 -m solutions.lab2_ddp.train --ddp torch --accum 2 --out runs/lab2-torch
    torchrun --nproc_per_node 1 -m solutions.lab2_ddp.train --batch-size 32 --out runs/lab2-ws1

--batch-size is per rank and per micro-step: the global batch is batch-size x ranks x accum,
so `--nproc_per_node 2 --batch-size 16` and `--nproc_per_node 1 --batch-size 32` train on the
same data, step for step. What changed from lab 1's train.py: the process group, the sampler
(sharded), the model (wrapped), the step (accumulation + sync), the checkpoint (per-rank RNG),
and the log (global tokens/s, exposed communication time).
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.metrics import StepLog
from labs.common.model import build_model, get_config
from labs.common.optim import make_optimizer, make_scheduler

from ..lab1_baseline import ThroughputMeter, model_state_bytes, seed_everything
from .bucketed import BucketedDDP
from .naive import NaiveDDP
from .sharding import ShardedSampler
from .state import load_checkpoint, save_checkpoint
from .step import train_step
from .torch_ddp import make_torch_ddp


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--dropout", type=float, default=None, help="override the config's (0: runs at any world size coincide)")
    ap.add_argument("--ddp", choices=["naive", "bucketed", "torch"], default="bucketed")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--accum", type=int, default=1, help="micro-steps per optimizer step")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--stop-at", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank, per micro-step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--out", default="runs/lab2")
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--device", default="auto", choices=cdist.DEVICE_CHOICES)
    return ap.parse_args(argv)


def wrap(model, args, env):
    if args.ddp == "naive":
        return NaiveDDP(model)
    if args.ddp == "bucketed":
        return BucketedDDP(model, bucket_cap_mb=args.bucket_mb)
    return make_torch_ddp(model, env.device, bucket_cap_mb=args.bucket_mb)


def main(argv=None) -> None:
    args = parse_args(argv)
    env = cdist.init(args.device)
    if not dist.is_initialized():
        raise SystemExit("lab 2 needs a process group: launch with `torchrun --nproc_per_node N -m ...`")
    cfg = get_config(args.config)
    if args.dropout is not None:
        cfg = dataclasses.replace(cfg, dropout=args.dropout)
    seq = cfg.block_size
    out, ckpt_path = Path(args.out), Path(args.out) / "ckpt.pt"

    seed_everything(args.seed + env.rank)  # ranks initialise differently on purpose: the wrapper's broadcast fixes it
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    model = build_model(cfg).to(env.device)
    ddp = wrap(model, args, env)
    optimizer = make_optimizer(model, lr=args.lr)
    scheduler = make_scheduler(optimizer, warmup=args.warmup, total=args.steps)
    sampler = ShardedSampler(data.num_windows(seq), args.batch_size, env.rank, env.world_size, seed=args.seed)
    start = load_checkpoint(ckpt_path, ddp, optimizer, scheduler, sampler) if ckpt_path.exists() else 0
    if start:
        cdist.log(env, f"resumed from {ckpt_path} at step {start}")

    comm = {"s": 0.0}  # time spent waiting in finish_gradient_synchronization: the *exposed* communication
    if hasattr(ddp, "finish_gradient_synchronization"):
        finish = ddp.finish_gradient_synchronization

        def timed_finish():
            t = time.perf_counter()
            finish()
            cdist.synchronize(env.device)
            comm["s"] += time.perf_counter() - t
        ddp.finish_gradient_synchronization = timed_finish

    tokens_per_step = args.batch_size * env.world_size * args.accum * seq
    cdist.log(env, f"{args.ddp} DDP, {env.world_size} ranks on {env.backend}; global batch "
                   f"{args.batch_size}x{env.world_size}x{args.accum} = {tokens_per_step} tokens/step")
    log = StepLog(out / "log.jsonl") if env.is_main else StepLog(None)
    meter = ThroughputMeter(env.device)
    for step in range(start, min(args.steps, args.stop_at or args.steps)):
        t0 = time.perf_counter()
        micro = [data.batch(sampler.next_ids(), seq, env.device) for _ in range(args.accum)]
        t1 = time.perf_counter()
        comm["s"] = 0.0
        loss = train_step(ddp, optimizer, scheduler, micro)
        t2 = time.perf_counter()
        meter.step(tokens_per_step)
        mean_loss = torch.tensor([loss], device=env.device)
        dist.all_reduce(mean_loss)  # for the log only: the loss of the global batch
        mean_loss = mean_loss.item() / env.world_size
        log.write(step=step + 1, loss=mean_loss, tokens_per_s=meter.tokens_per_s, world_size=env.world_size,
                  model_state_bytes=model_state_bytes(model, optimizer)["total"], data_s=t1 - t0,
                  step_s=t2 - t1, comm_wait_s=comm["s"] if hasattr(ddp, "finish_gradient_synchronization") else None,
                  **cdist.peak_bytes(env.device))
        if (step + 1) % args.ckpt_every == 0 or step + 1 in (args.steps, args.stop_at):
            save_checkpoint(ckpt_path, ddp, optimizer, scheduler, sampler, step + 1)
        if (step + 1) % 10 == 0 or step == start:
            exposed = f"{1e3 * comm['s']:.1f} ms" if hasattr(ddp, "finish_gradient_synchronization") else "inside backward"
            cdist.log(env, f"step {step + 1:5d} | loss {mean_loss:.4f} | {meter.tokens_per_s:9.0f} tok/s | "
                           f"data {1e3 * (t1 - t0):.1f} ms step {1e3 * (t2 - t1):.1f} ms (comm wait {exposed})")
    log.close()
    cdist.teardown()


if __name__ == "__main__":
    main()
