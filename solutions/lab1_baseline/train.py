"""Lab 1: train the GPT on one device, measure it, checkpoint it, resume it exactly.

    python -m solutions.lab1_baseline.train --config tiny --steps 200 --stop-at 120 --out runs/lab1
    python -m solutions.lab1_baseline.train --config tiny --steps 200 --out runs/lab1   # resumes at 120
    python -m solutions.lab1_baseline.train --config small --steps 300 --out runs/lab1-small
    python -m solutions.lab1_baseline.train --steps 40 --profile --out runs/lab1-trace   # + OUT/trace.json
    python -m solutions.lab1_baseline.train --config gpt2-124m --precision bf16 --out runs/lab1-bf16   # a GPU

One line per step goes to OUT/log.jsonl (step, loss, lr, tokens/s, MFU, model-state bytes, memory,
where the step's time went: data_s forward_s backward_s optimizer_s other_s, and input_stall = the
fraction of the step spent waiting for data); the full training state goes to OUT/ckpt.pt every
--ckpt-every steps and at the end. If OUT/ckpt.pt exists the run resumes from it. Batches come from
make_loader (pipeline.py) over samples that each cost --sample-cost-ms of CPU time to prepare.
--profile records steps 8-10 with torch.profiler into OUT/trace.json (open it in ui.perfetto.dev).
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch

from labs.common import dist as cdist
from labs.common import precision
from labs.common.data import BatchSampler, TokenFile, ensure_corpus
from labs.common.metrics import StepLog, device_peak_or_none, flops_per_token, mfu
from labs.common.model import build_model, count_params, get_config
from labs.common.optim import make_optimizer, make_scheduler
from labs.common.pipeline import WindowDataset
from labs.instruments.profiler import StepProfiler, format_phases
from labs.instruments.trace import TraceWindow

from .meters import ThroughputMeter, model_state_bytes
from .pipeline import make_loader
from .seeding import seed_everything
from .state import load_checkpoint, save_checkpoint
from .step import train_step


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny", help="model config: tiny | small | gpt2-124m")
    ap.add_argument("--steps", type=int, default=200, help="length of the run (and of its LR schedule)")
    ap.add_argument("--stop-at", type=int, default=None, help="stop after this step, as a preemption would")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=None, help="default: the config's block_size")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--out", default="runs/lab1")
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--device", default="auto", choices=cdist.DEVICE_CHOICES)
    precision.add_argument(ap)
    ap.add_argument("--peak-tflops", type=float, default=None, help="the MFU denominator for a GPU not in the table")
    ap.add_argument("--sample-cost-ms", type=float, default=1.0, help="CPU time to prepare one sample")
    ap.add_argument("--profile", action="store_true", help="write a torch.profiler trace to OUT/trace.json")
    ap.add_argument("--memory-snapshot", action="store_true",
                    help="GPU only: record allocations, write OUT/memory-snapshot.pickle (pytorch.org/memory_viz)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    env = cdist.init(args.device)
    cfg = get_config(args.config)
    seq_len = args.seq_len or cfg.block_size
    out = Path(args.out)
    ckpt_path = out / "ckpt.pt"

    seed_everything(args.seed)
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    model = build_model(cfg).to(env.device)
    optimizer = make_optimizer(model, lr=args.lr)
    scheduler = make_scheduler(optimizer, warmup=args.warmup, total=args.steps)
    sampler = BatchSampler(data.num_windows(seq_len), args.batch_size, seed=args.seed)

    start = 0
    if ckpt_path.exists():
        start = load_checkpoint(ckpt_path, model, optimizer, scheduler, sampler)
        cdist.log(env, f"resumed from {ckpt_path} at step {start}")
    tokens_per_step = args.batch_size * seq_len
    # on CPU: a matmul measured here; on a GPU: the datasheet peak of the precision this run computes in
    peak, why = device_peak_or_none(env.device, cdist.device_name(env.device),
                                    precision.peak_key(args.precision, env.device), args.peak_tflops)
    if why:
        cdist.log(env, f"MFU not computed: {why}")
    cdist.log(env, f"{args.config}: {count_params(model) / 1e6:.2f} M params on {cdist.device_name(env.device)}; "
                   f"{tokens_per_step} tokens/step; {flops_per_token(cfg, seq_len) / 1e6:.1f} MFLOP/token; "
                   f"loss floor {data.meta['entropy_rate']:.3f} nats")

    stop = min(args.steps, args.stop_at or args.steps)
    dataset = WindowDataset(data.directory, seq_len, cost_s=args.sample_cost_ms / 1e3)
    # The loader reads ahead of training (that is its job), so it gets a copy of the sampler: the one the
    # checkpoint saves moves only as steps complete, and a resume re-reads exactly the unfinished batches.
    ahead = copy.copy(sampler)
    loader = make_loader(dataset, (list(ahead.next_ids()) for _ in range(start, stop)), env.device)
    prof = StepProfiler(env.device).attach(model, optimizer)
    if args.memory_snapshot and not cdist.start_memory_history(env.device):
        cdist.log(env, "--memory-snapshot: only on a GPU (on CPU, model-state bytes are counted from tensors)")

    log = StepLog(out / "log.jsonl")
    meter = ThroughputMeter(env.device)
    cdist.reset_peak(env.device)  # the allocator's peak from here on: training's, not set-up's
    with TraceWindow(out / "trace.json", env.device, enabled=args.profile) as trace:
        for step in range(start, stop):
            prof.begin_step()
            # fork_rng: a DataLoader draws its workers' seed from torch's RNG when it starts; restoring the
            # state keeps dropout's stream, and so an exact resume, independent of the input pipeline.
            with prof.phase("data"), torch.random.fork_rng(devices=[]):
                batch = next(loader)
            sampler.next_ids()  # the checkpointed position moves with the batch just consumed
            with precision.autocast(env.device, args.precision):  # bf16: fp32 master weights, bf16 matmuls
                loss = train_step(model, optimizer, scheduler, batch)
            phases = prof.end_step()
            meter.step(tokens_per_step)
            tps = meter.tokens_per_s
            rec = log.write(
                step=step + 1, loss=loss, lr=scheduler.get_last_lr()[0], tokens_per_s=tps,
                mfu=mfu(tps, cfg, seq_len, peak), model_state_bytes=model_state_bytes(model, optimizer)["total"],
                compute_s=phases["step_s"] - phases["data_s"], **phases,
                **cdist.peak_bytes(env.device), **cdist.memory_stats(env.device),
            )
            if (step + 1) % args.ckpt_every == 0 or step + 1 in (args.steps, args.stop_at):
                save_checkpoint(ckpt_path, model, optimizer, scheduler, sampler, step + 1)
            if (step + 1) % 10 == 0 or step == start:
                cdist.log(env, f"step {step + 1:5d} | loss {loss:.4f} | {tps:9.0f} tok/s | "
                               f"state {rec['model_state_bytes'] / 2**20:.2f} MiB | {format_phases(rec)} | "
                               f"input stall {rec['input_stall']:.0%}")
            trace.step()
    log.close()
    s = prof.summary()
    if s:
        run_mfu = mfu(tokens_per_step / s["step_s"], cfg, seq_len, peak)
        cdist.log(env, f"where a step went (mean of {s['steps']}): {format_phases(s)}; input stall "
                       f"{s['input_stall']:.0%}; CPU {s['cpu_util']:.0%} of a core"
                       + (f"; MFU {run_mfu:.1%} of {peak / 1e9:,.0f} GFLOP/s" if run_mfu else ""))
    if trace.written:
        cdist.log(env, f"trace: {trace.written} (open in https://ui.perfetto.dev)")
    if args.memory_snapshot and cdist.dump_memory_snapshot(env.device, out / "memory-snapshot.pickle"):
        cdist.log(env, f"memory snapshot: {out / 'memory-snapshot.pickle'} (open in https://pytorch.org/memory_viz)")
    cdist.teardown()


if __name__ == "__main__":
    main()
