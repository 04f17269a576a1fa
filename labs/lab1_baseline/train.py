# GENERATED from solutions/lab1_baseline/train.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Lab 1: train the GPT on one device, measure it, checkpoint it, resume it exactly.

    python -m labs.lab1_baseline.train --config tiny --steps 200 --stop-at 120 --out runs/lab1
    python -m labs.lab1_baseline.train --config tiny --steps 200 --out runs/lab1   # resumes at 120
    python -m labs.lab1_baseline.train --config small --steps 300 --out runs/lab1-small

One line per step goes to OUT/log.jsonl (step, loss, lr, tokens/s, model-state bytes, memory,
where the step's time went); the full training state goes to OUT/ckpt.pt every --ckpt-every
steps and at the end. If OUT/ckpt.pt exists the run resumes from it.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from labs.common import dist as cdist
from labs.common.data import BatchSampler, TokenFile, ensure_corpus
from labs.common.metrics import StepLog, flops_per_token, mfu, peak_flops
from labs.common.model import build_model, count_params, get_config
from labs.common.optim import make_optimizer, make_scheduler

from .meters import ThroughputMeter, model_state_bytes
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
    peak = peak_flops(cdist.device_name(env.device))
    cdist.log(env, f"{args.config}: {count_params(model) / 1e6:.2f} M params on {cdist.device_name(env.device)}; "
                   f"{tokens_per_step} tokens/step; {flops_per_token(cfg, seq_len) / 1e6:.1f} MFLOP/token; "
                   f"loss floor {data.meta['entropy_rate']:.3f} nats")

    log = StepLog(out / "log.jsonl")
    meter = ThroughputMeter(env.device)
    for step in range(start, min(args.steps, args.stop_at or args.steps)):
        t0 = time.perf_counter()
        batch = data.batch(sampler.next_ids(), seq_len, env.device)
        t1 = time.perf_counter()
        loss = train_step(model, optimizer, scheduler, batch)
        t2 = time.perf_counter()  # train_step's .item() already waited for the device
        meter.step(tokens_per_step)
        tps = meter.tokens_per_s
        rec = log.write(
            step=step + 1, loss=loss, lr=scheduler.get_last_lr()[0], tokens_per_s=tps,
            mfu=mfu(tps, cfg, seq_len, peak), model_state_bytes=model_state_bytes(model, optimizer)["total"],
            data_s=t1 - t0, compute_s=t2 - t1, **cdist.peak_bytes(env.device),
        )
        if (step + 1) % args.ckpt_every == 0 or step + 1 in (args.steps, args.stop_at):
            save_checkpoint(ckpt_path, model, optimizer, scheduler, sampler, step + 1)
        if (step + 1) % 10 == 0 or step == start:
            cdist.log(env, f"step {step + 1:5d} | loss {loss:.4f} | {tps:9.0f} tok/s | "
                           f"state {rec['model_state_bytes'] / 2**20:.2f} MiB | "
                           f"data {1e3 * rec['data_s']:.1f} ms compute {1e3 * rec['compute_s']:.1f} ms")
    log.close()
    cdist.teardown()


if __name__ == "__main__":
    main()
