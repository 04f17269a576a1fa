"""Lab 2: lab 1's training, data-parallel. Needs torchrun, even for one rank.

    torchrun --nproc_per_node 2 -m solutions.lab2_ddp.train --ddp bucketed --steps 200 --out runs/lab2
    torchrun --nproc_per_node 2 -m solutions.lab2_ddp.train --ddp torch --accum 2 --out runs/lab2-torch
    torchrun --nproc_per_node 1 -m solutions.lab2_ddp.train --batch-size 32 --out runs/lab2-ws1
    torchrun --nproc_per_node 2 -m solutions.lab2_ddp.train --ddp naive --steps 20 --profile --out runs/lab2-trace

--batch-size is per rank and per micro-step: the global batch is batch-size x ranks x accum,
so `--nproc_per_node 2 --batch-size 16` and `--nproc_per_node 1 --batch-size 32` train on the
same data, step for step. What changed from lab 1's train.py: the process group, the sampler
(sharded), the model (wrapped), the step (accumulation + sync), the checkpoint (per-rank RNG),
and the log (global tokens/s; comm_s: the exposed communication, time the step waited for gradients;
comm_overlap: the share of all-reduce time hidden behind backward, from the all-reduces' timestamps).
--profile writes OUT/trace-rank<R>.json per rank: see where the all-reduces sit relative to backward.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.common import precision
from labs.common.data import TokenFile, ensure_corpus
from labs.common.metrics import StepLog, device_peak_or_none, mfu
from labs.common.model import build_model, get_config
from labs.common.optim import make_optimizer, make_scheduler
from labs.instruments.collectives import CollectiveTimeline, overlap
from labs.instruments.profiler import StepProfiler, format_phases
from labs.instruments.trace import TraceWindow

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
    ap.add_argument("--dropout", type=float, default=None,
                    help="override the config's (0: runs at any world size coincide)")
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
    precision.add_argument(ap)
    ap.add_argument("--peak-tflops", type=float, default=None, help="the MFU denominator for a GPU not in the table")
    ap.add_argument("--profile", action="store_true", help="write a torch.profiler trace per rank to OUT/")
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

    prof = StepProfiler(env.device).attach(model, optimizer)  # after the wrapper: its grad hooks run first
    if hasattr(ddp, "finish_gradient_synchronization"):  # torch DDP has none: its reducer waits inside backward
        finish = ddp.finish_gradient_synchronization

        def timed_finish():
            with prof.phase("comm"):  # waiting for gradients: the communication backward did *not* hide
                finish()
        ddp.finish_gradient_synchronization = timed_finish
    # Hidden communication from the all-reduces' own timestamps: exact where collectives run on host threads
    # (gloo); on a GPU they run on a stream, so read the overlap off the --profile trace instead.
    timeline = None if cdist.is_async(env.device) else CollectiveTimeline()
    hidden = {"hidden": 0.0, "total": 0.0}
    peak, why = device_peak_or_none(env.device, cdist.device_name(env.device),
                                    precision.peak_key(args.precision, env.device), args.peak_tflops)
    if why:
        cdist.log(env, f"MFU not computed: {why}")

    tokens_per_step = args.batch_size * env.world_size * args.accum * seq
    cdist.log(env, f"{args.ddp} DDP, {env.world_size} ranks on {env.backend}; global batch "
                   f"{args.batch_size}x{env.world_size}x{args.accum} = {tokens_per_step} tokens/step")
    log = StepLog(out / "log.jsonl") if env.is_main else StepLog(None)
    meter = ThroughputMeter(env.device)
    cdist.reset_peak(env.device)  # the allocator's peak from here on: training's, not set-up's
    with TraceWindow(out / f"trace-rank{env.rank}.json", env.device, enabled=args.profile) as trace:
        for step in range(start, min(args.steps, args.stop_at or args.steps)):
            prof.begin_step()
            if timeline:
                timeline.start()
            with prof.phase("data"):
                micro = [data.batch(sampler.next_ids(), seq, env.device) for _ in range(args.accum)]
            with precision.autocast(env.device, args.precision):  # bf16: fp32 master weights, bf16 matmuls
                loss = train_step(ddp, optimizer, scheduler, micro)
            phases = prof.end_step()
            spans = timeline.stop() if timeline else []
            h, c = overlap(spans, prof.host_spans("backward")) if timeline else (0.0, 0.0)
            if step - start >= 2:  # past warm-up, for the run's summary
                hidden["hidden"] += h
                hidden["total"] += c
            meter.step(tokens_per_step)
            mean_loss = torch.tensor([loss], device=env.device)
            dist.all_reduce(mean_loss)  # for the log only: the loss of the global batch
            mean_loss = mean_loss.item() / env.world_size
            tps = meter.tokens_per_s
            log.write(step=step + 1, loss=mean_loss, tokens_per_s=tps, world_size=env.world_size,
                      mfu=mfu(tps / env.world_size, cfg, seq, peak),  # per device: each rank did 1/N of the tokens
                      model_state_bytes=model_state_bytes(model, optimizer)["total"], comm_wait_s=phases["comm_s"],
                      comm_overlap=h / c if c else None, **phases, **cdist.peak_bytes(env.device),
                      **cdist.memory_stats(env.device))
            if (step + 1) % args.ckpt_every == 0 or step + 1 in (args.steps, args.stop_at):
                save_checkpoint(ckpt_path, ddp, optimizer, scheduler, sampler, step + 1)
            if (step + 1) % 10 == 0 or step == start:
                cdist.log(env, f"step {step + 1:5d} | loss {mean_loss:.4f} | {tps:9.0f} tok/s | {format_phases(phases)}"
                               + ("" if phases["comm_s"] is not None else " (comm: inside backward)"))
            trace.step()
    log.close()
    s = prof.summary()
    if s:
        share = f"; all-reduce time hidden behind backward {hidden['hidden'] / hidden['total']:.0%}" \
            if hidden["total"] else ""
        cdist.log(env, f"where a step went (mean of {s['steps']}): {format_phases(s)}; input stall "
                       f"{s['input_stall']:.0%}{share}; CPU {s['cpu_util']:.0%} of a core", all_ranks=True)
    if trace.written:
        cdist.log(env, f"trace: {trace.written} (open in https://ui.perfetto.dev)", all_ranks=True)
    cdist.teardown()


if __name__ == "__main__":
    main()
