# GENERATED from solutions/lab3_sharding/compare.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Six strategies side by side: bytes per rank (measured and predicted), bytes sent per step, tokens/s, checkpoints.

    torchrun --nproc_per_node 2 -m labs.lab3_sharding.compare --out runs/lab3/compare-2.json
    torchrun --nproc_per_node 2 -m labs.lab3_sharding.compare --strategies ddp,fsdp --profile
        --out runs/lab3/p.json

For each of DDP, ZeRO-1 and ZeRO-2 (yours), FSDP2 (yours), DeepSpeed ZeRO 1/2/3: train a few steps, count the
bytes this rank holds from its tensors, beside what your memory_model.bytes_per_rank predicts for fp32 AdamW
(DeepSpeed: its weights and optimizer state plus its fp32 master partition, 4/N bytes per parameter), and the
bytes it sends in one step (labs.instruments.comm_bytes; torch DDP's all-reduce, issued by its C++ reducer, is
added from its formula 2·4Ψ(N−1)/N), time a window, save a checkpoint in the strategy's own format and list its
files. FSDP2 also exports a full state dict for inference (loaded back into a plain GPT), and DeepSpeed's ZeRO-3
checkpoint is consolidated into one fp32 state dict (its parameter count is reported). Each strategy's timed
steps are split into forward, backward and optimizer (where each strategy's collectives land: the trace names
them), with this rank's CPU utilisation and MFU; --profile writes a trace per strategy and rank.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.metrics import device_peak_flops, mfu
from labs.common.model import build_model, count_params
from labs.common.optim import ADAMW, make_optimizer, make_scheduler, param_groups
from labs.instruments.comm_bytes import CommBytes, sent
from labs.instruments.profiler import StepProfiler
from labs.instruments.trace import TraceWindow

from . import dcp_state
from .deepspeed_zero import make_engine
from .fsdp import apply_fsdp, local_bytes
from .memory_model import STRATEGIES, bytes_per_rank
from .zero1 import ShardedOptimizer
from .zero2 import Zero2Optimizer

BATCH, SEQ, STEPS = 8, 64, 6


def tensor_bytes(ts) -> int:
    return sum(local_bytes(t) for t in ts if torch.is_tensor(t))


def predicted(strategy: str, n: int) -> dict:
    """Your bytes_per_rank for one parameter, fp32 AdamW, N = n: what each measurement is set beside (NaN while
    bytes_per_rank is still a TODO)."""
    try:
        return bytes_per_rank(1, n, strategy)
    except NotImplementedError:
        return dict.fromkeys(("weights", "grads", "optimizer", "total"), float("nan"))


def files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def run(name, env, data, out: Path, comm: CommBytes, profile: bool = False) -> dict:
    torch.manual_seed(0)
    model = build_model("tiny").to(env.device)
    psi, n = count_params(model), env.world_size
    ckpt = out / f"ckpt-{name}"
    if env.is_main:
        shutil.rmtree(ckpt, ignore_errors=True)
    dist.barrier()
    if name.startswith("deepspeed"):
        stage = int(name[-1])
        engine = make_engine(model, stage, BATCH)
        phases = (lambda x, y: engine(x, y)[1], engine.backward, engine.step)
        opt = engine.optimizer
        inner = getattr(opt, "optimizer", opt)
        row = predicted(STRATEGIES[stage], n)  # persistent: weights + master partition + moments (grads freed)
        formula = row["weights"] + 4 / n + row["optimizer"]

        def held():
            master = (getattr(opt, "single_partition_of_fp32_groups", None)
                      or getattr(opt, "fp32_partitioned_groups_flat", []))
            weights = sum((p.ds_tensor if hasattr(p, "ds_tensor") else p).numel() * 4 for p in model.parameters())
            return weights + tensor_bytes(master) + tensor_bytes(v for s in inner.state.values() for v in s.values())

        def save():
            engine.save_checkpoint(str(ckpt), tag="step")
    else:
        wrapped = (apply_fsdp(model) if name == "fsdp" else model if name == "zero2" else
                   torch.nn.parallel.DistributedDataParallel(model, device_ids=cdist.ddp_device_ids(env.device)))
        opt = (ShardedOptimizer(param_groups(model), torch.optim.AdamW, lr=3e-3, **ADAMW) if name == "zero1"
               else Zero2Optimizer(param_groups(model), torch.optim.AdamW, lr=3e-3, **ADAMW) if name == "zero2"
               else make_optimizer(wrapped))
        sched = make_scheduler(getattr(opt, "optim", opt), warmup=2, total=100)

        def forward(x, y):
            opt.zero_grad(set_to_none=True)
            return wrapped(x, y)[1]

        def update():
            opt.step()
            sched.step()
        phases = (forward, lambda loss: loss.backward(), update)

        local_opt = getattr(opt, "optim", opt)
        formula = predicted(STRATEGIES[("ddp", "zero1", "zero2", "fsdp").index(name)], n)["total"]

        def held():  # zero2: the model's .grad are freed in backward; the owned slices' gradients count
            grads = list(wrapped.parameters()) + [p for g in local_opt.param_groups for p in g["params"]]
            return (tensor_bytes(wrapped.parameters())
                    + tensor_bytes(p.grad for p in {id(p): p for p in grads}.values())
                    + tensor_bytes(v for s in local_opt.state.values() for v in s.values()))

        def save():
            if name == "fsdp":
                from labs.common.data import BatchSampler
                dcp_state.save_sharded(ckpt, wrapped, opt, sched, BatchSampler(10, 1), STEPS)
                full = get_model_state_dict(wrapped, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
                if env.is_main:  # an inference checkpoint: one file, loads into a plain GPT
                    torch.save(full, ckpt / "model-full.pt")
                    plain = build_model("tiny")
                    plain.load_state_dict(torch.load(ckpt / "model-full.pt", weights_only=True))
            else:
                ckpt.mkdir(parents=True, exist_ok=True)
                if env.is_main:
                    torch.save({"model": model.state_dict()}, ckpt / "model.pt")
                if name in ("zero1", "zero2"):  # each rank's optimizer shard
                    torch.save(opt.state_dict(), ckpt / f"optim-rank{env.rank}.pt")
                elif env.is_main:
                    torch.save(opt.state_dict(), ckpt / "optim.pt")
            dist.barrier()

    prof = StepProfiler(env.device)

    def step(x, y):
        forward, backward, update = phases
        with prof.phase("forward"):
            loss = forward(x, y)
        with prof.phase("backward"):  # FSDP/ZeRO-3's collectives, and ZeRO-2's gradients', run in here
            backward(loss)
        with prof.phase("optimizer"):  # ZeRO-1's and ZeRO-2's parameter traffic
            update()
        return loss

    batches = [data.batch(range(s * 64 + env.rank * BATCH, s * 64 + (env.rank + 1) * BATCH), SEQ, env.device)
               for s in range(STEPS)]
    step(*batches[0])
    measured = held()
    comm.start()
    step(*batches[0])
    comm_sent = sent(comm.stop()) + (8 * psi * (n - 1) / n if name in ("ddp", "zero1") else 0)
    t0 = time.perf_counter()
    with TraceWindow(out / f"trace-{name}-rank{env.rank}.json", env.device, wait=1, warmup=1, active=3,
                     enabled=profile) as trace:
        for x, y in batches:
            prof.begin_step()
            loss = step(x, y)
            prof.end_step()
            trace.step()
    cdist.synchronize(env.device)
    tps = BATCH * SEQ * n * STEPS / (time.perf_counter() - t0)
    save()
    peak = device_peak_flops(env.device, cdist.device_name(env.device))
    result = {"strategy": name, "world_size": n, "psi": psi, "bytes_measured": measured,
              "bytes_formula": formula * psi, "bytes_per_param": measured / psi, "tokens_per_s": tps,
              "sent_per_step": comm_sent, "sent_over_ddp": comm_sent / (8 * psi * (n - 1) / n) if n > 1 else None,
              "loss": loss.item(), "checkpoint": files(ckpt) if env.is_main else None,
              "phases": prof.summary(skip=1), "mfu": mfu(tps / n, model.cfg, SEQ, peak)}
    if name == "deepspeed3" and env.is_main:  # consolidate ZeRO-3 shards into one fp32 state dict
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
        sd = get_fp32_state_dict_from_zero_checkpoint(str(ckpt), tag="step")
        result["consolidated_params"] = sum(v.numel() for k, v in sd.items() if k != "head.weight")
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/lab3/compare.json")
    ap.add_argument("--strategies", default="ddp,zero1,zero2,fsdp,deepspeed1,deepspeed2,deepspeed3")
    ap.add_argument("--profile", action="store_true",
                    help="a torch.profiler trace per strategy and rank, next to --out")
    args = ap.parse_args(argv)
    comm = CommBytes()
    env = cdist.init(timeout_s=120)
    data = TokenFile.open(ensure_corpus(256))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = [run(s, env, data, out.parent, comm, args.profile) for s in args.strategies.split(",")]
    if env.is_main:
        out.write_text(json.dumps(results, indent=1))
        for r in results:
            print(f"{r['strategy']:11s} {r['bytes_per_param']:6.2f} B/param"
                  f" (formula {r['bytes_formula'] / r['psi']:5.2f})"
                  f" {r['tokens_per_s']:9,.0f} tok/s  sent {r['sent_per_step'] / 1e3:6.1f} kB/step"
                  f" ({r['sent_over_ddp'] or 0:.2f}x DDP)  checkpoint: {len(r['checkpoint'])} files, "
                  f"{sum(r['checkpoint'].values()) / 1e6:.2f} MB | " + ", ".join(
                      f"{k[:-2]} {1e3 * r['phases'][k]:.1f}" for k in ("forward_s", "backward_s", "optimizer_s"))
                  + f" ms | MFU {r['mfu']:.1%}, CPU {r['phases']['cpu_util']:.0%}")
    cdist.teardown()


if __name__ == "__main__":
    main()
