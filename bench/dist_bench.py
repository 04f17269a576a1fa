"""Multi-rank measurements for make bench; run under torchrun (bench/run.py launches it).

    torchrun --nproc_per_node 2 -m bench.dist_bench ddp OUT.json        # naive / bucketed / torch DDP (lab 2)
    torchrun --nproc_per_node 2 -m bench.dist_bench allreduce OUT.json  # bus bandwidth by message size
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model
from labs.common.optim import make_optimizer
from solutions.lab2_ddp import BucketedDDP, NaiveDDP, make_torch_ddp

BATCH, SEQ = 16, 64  # per rank: weak scaling, each rank keeps its batch as ranks are added


def ddp(env, windows: int = 9, steps: int = 5) -> dict:
    data = TokenFile.open(ensure_corpus(256))
    makers = {"naive": NaiveDDP, "bucketed": BucketedDDP, "torch": lambda m: make_torch_ddp(m, env.device)}
    setups = {}
    for name, make in makers.items():
        torch.manual_seed(0)
        model = build_model("tiny").to(env.device)
        setups[name] = (make(model), make_optimizer(model))
    lo = env.rank * BATCH
    batches = [data.batch(range(lo + s * 1000, lo + s * 1000 + BATCH), SEQ, env.device) for s in range(steps)]
    rates = {k: [] for k in setups}
    for w in range(windows + 1):
        for name in (list(setups) if w % 2 else list(reversed(setups))):
            model, opt = setups[name]
            dist.barrier()
            t0 = time.perf_counter()
            for x, y in batches:
                opt.zero_grad(set_to_none=True)
                model(x, y)[1].backward()
                getattr(model, "finish_gradient_synchronization", lambda: None)()
                opt.step()
            cdist.synchronize(env.device)
            if w:  # window 0 is warm-up
                rates[name].append(BATCH * SEQ * env.world_size * steps / (time.perf_counter() - t0))
    return {"world_size": env.world_size, "tokens_per_s": {k: round(statistics.median(v)) for k, v in rates.items()},
            "bucketed_over_torch": round(
                statistics.median(a / b for a, b in zip(rates["bucketed"], rates["torch"])), 3)}


def allreduce(env, reps: int = 15) -> dict:
    rows = []
    for size in [2**k for k in range(10, 27, 2)]:  # 1 KB .. 64 MB
        t = torch.ones(size // 4, device=env.device)
        times = []
        for i in range(reps + 1):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            cdist.synchronize(env.device)
            if i:
                times.append(time.perf_counter() - t0)
        sec = statistics.median(times)
        algbw = size / sec
        rows.append({"bytes": size, "ms": round(1e3 * sec, 4), "algbw_GBps": round(algbw / 1e9, 4),
                     "busbw_GBps": round(algbw * 2 * (env.world_size - 1) / env.world_size / 1e9, 4)})
    return {"world_size": env.world_size, "backend": env.backend, "rows": rows}


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    env = cdist.init(timeout_s=120)
    result = {"ddp": ddp, "allreduce": allreduce}[mode](env)
    if env.is_main:
        with open(out, "w") as f:
            json.dump(result, f)
    cdist.teardown()
