"""Lab 5: lab 2's training as a scheduler runs it: preemptible, requeueable, resumable, measured.

    sbatch solutions/lab5_scheduler/train.sbatch             # what you normally do (see that file)
    torchrun --nproc_per_node 2 -m solutions.lab5_scheduler.train --steps 80 --out runs/lab5/by-hand

What changed from lab 2's train.py: a preemption flag every rank checks at each step boundary (a
signal becomes a checkpoint and a clean exit, at the same step on every rank); resume keyed on
the checkpoint found and on SLURM_RESTART_COUNT, logged as a "start" record so a log shows each
run of a requeued job; torch DDP only, no profiler or trace (lab 2 has those).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.common import precision
from labs.common.data import TokenFile, ensure_corpus
from labs.common.metrics import StepLog
from labs.common.model import build_model, get_config
from labs.common.optim import make_optimizer, make_scheduler

from ..lab1_baseline import ThroughputMeter, seed_everything
from ..lab2_ddp import ShardedSampler, make_torch_ddp, train_step
from ..lab2_ddp.state import save_checkpoint
from .preemption import PreemptionFlag
from .restart import resume


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--out", default="runs/lab5/by-hand")
    ap.add_argument("--ckpt-every", type=int, default=25, help="periodic checkpoints: what a hard kill falls back to")
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds to idle per step (a slower job, for demos)")
    ap.add_argument("--save-delay", type=float, default=0.0,
                    help="seconds a preemption checkpoint takes at least (a larger model's save; the checker uses it "
                         "to see that the job is requeued only once the save is done)")
    ap.add_argument("--device", default="auto", choices=cdist.DEVICE_CHOICES)
    precision.add_argument(ap)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    flag = PreemptionFlag().install()  # first: a warning that lands during start-up must not be lost
    env = cdist.init(args.device)
    if not dist.is_initialized():
        raise SystemExit("lab 5's training needs a process group: launch it with torchrun (train.sbatch does)")
    cfg = get_config(args.config)
    seq = cfg.block_size
    out, ckpt_path = Path(args.out), Path(args.out) / "ckpt.pt"
    restart = int(os.environ.get("SLURM_RESTART_COUNT", 0))

    seed_everything(args.seed + env.rank)
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    model = build_model(cfg).to(env.device)
    ddp = make_torch_ddp(model, env.device)
    optimizer = make_optimizer(model, lr=args.lr)
    scheduler = make_scheduler(optimizer, warmup=args.warmup, total=args.steps)
    sampler = ShardedSampler(data.num_windows(seq), args.batch_size, env.rank, env.world_size, seed=args.seed)
    start = resume(ckpt_path, restart, ddp, optimizer, scheduler, sampler)

    log = StepLog(out / "log.jsonl") if env.is_main else StepLog(None)
    log.write(event="start", restart_count=restart, resumed_from=start, world_size=env.world_size,
              job_id=os.environ.get("SLURM_JOB_ID"), node=os.uname().nodename)
    cdist.log(env, f"run {restart + 1} of this job: {'resumed at step ' + str(start) if start else 'from scratch'}, "
                   f"{env.world_size} ranks on {env.backend}")
    tokens_per_step = args.batch_size * env.world_size * seq
    meter = ThroughputMeter(env.device)
    step = start
    while step < args.steps:
        if flag.should_stop(env.device):
            time.sleep(args.save_delay)  # a kill in here loses this checkpoint, as one during a long save would
            save_checkpoint(ckpt_path, ddp, optimizer, scheduler, sampler, step)
            log.write(event="preempted", at_step=step, signal=flag.received)  # not step=: read_log keys records by step
            cdist.log(env, f"preemption signal: checkpoint at step {step} saved; exiting for the requeue")
            break
        t0 = time.perf_counter()
        batch = data.batch(sampler.next_ids(), seq, env.device)
        with precision.autocast(env.device, args.precision):  # bf16: fp32 master weights, bf16 matmuls
            loss = train_step(ddp, optimizer, scheduler, [batch])
        step += 1
        meter.step(tokens_per_step)
        mean_loss = torch.tensor([loss], device=env.device)
        dist.all_reduce(mean_loss)
        log.write(step=step, loss=mean_loss.item() / env.world_size, tokens=tokens_per_step,
                  tokens_per_s=meter.tokens_per_s, step_s=time.perf_counter() - t0, world_size=env.world_size,
                  restart_count=restart)
        if step % args.ckpt_every == 0 or step == args.steps:
            save_checkpoint(ckpt_path, ddp, optimizer, scheduler, sampler, step)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    else:
        log.write(event="finished", at_step=step)
        cdist.log(env, f"finished: step {step}, {meter.tokens_per_s:.0f} tokens/s")
    log.close()
    cdist.teardown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
