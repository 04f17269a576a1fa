"""Make the pictures in docs/reading-a-trace.md from the course's own runs (CPU, 2 ranks, ~1 minute).

    .venv/bin/python docs/make_trace_figures.py        # -> docs/img/trace-*.png; traces kept in runs/trace-figures/

Four scenes, each recorded with labs.instruments.trace.TraceWindow and drawn with labs.instruments.trace_plot:
    bucketed     lab 2's train.py, BucketedDDP with 50 KB buckets: all-reduces launched during backward
    naive        lab 2's train.py, NaiveDDP: every all-reduce after backward, the training thread blocked
    straggler    BucketedDDP where rank 1's input pipeline costs an extra 25 ms a step: rank 0 waits
    input-stall  lab 1's pipeline: samples that cost 1 ms of CPU, prepared in-process vs in 2 DataLoader workers
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs" / "trace-figures"
IMG = ROOT / "docs" / "img"


def torchrun(*args) -> None:
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    *map(str, args)], check=True, cwd=ROOT, capture_output=True)


def lab2(kind: str) -> list[Path]:
    out = RUNS / f"lab2-{kind}"
    shutil.rmtree(out, ignore_errors=True)
    torchrun("-m", "solutions.lab2_ddp.train", "--ddp", kind, "--bucket-mb", 0.05, "--steps", 10, "--profile",
             "--out", out)
    return [out / "trace-rank0.json", out / "trace-rank1.json"]


def _loop(prof, trace, steps, batch_fn, ddp, opt, rank_delay_s: float = 0.0):
    """Train `steps` steps, each phase marked; rank_delay_s of extra CPU work in the data phase."""
    from labs.common.pipeline import transform

    for i in range(steps):
        prof.begin_step()
        with prof.phase("data"):
            x, y = batch_fn(i)
            if rank_delay_s:
                transform(x.numpy(), rank_delay_s)
        opt.zero_grad(set_to_none=True)
        ddp(x, y)[1].backward()
        finish = getattr(ddp, "finish_gradient_synchronization", None)
        if finish:
            with prof.phase("comm"):
                finish()
        opt.step()
        prof.end_step()
        trace.step()


def straggler_worker() -> None:
    """Run under torchrun (2 ranks): rank 1 is the straggler."""
    import torch

    from labs.common import dist as cdist
    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.model import build_model
    from labs.common.optim import make_optimizer
    from labs.instruments.profiler import StepProfiler
    from labs.instruments.trace import TraceWindow
    from solutions.lab2_ddp import BucketedDDP

    env = cdist.init()
    torch.manual_seed(0)
    model = build_model("tiny").to(env.device)
    ddp, opt = BucketedDDP(model, bucket_cap_mb=0.05), make_optimizer(model)
    prof = StepProfiler(env.device).attach(model, opt)
    data = TokenFile.open(ensure_corpus(256))
    lo = env.rank * 16
    with TraceWindow(RUNS / "straggler" / f"trace-rank{env.rank}.json", env.device, wait=3, warmup=1,
                     active=3) as trace:
        _loop(prof, trace, 7, lambda i: data.batch(range(lo + 64 * i, lo + 64 * i + 16), 64, env.device), ddp, opt,
              rank_delay_s=0.025 if env.rank == 1 else 0.0)
    cdist.teardown()


def input_stall() -> list[Path]:
    import torch
    from torch.utils.data import DataLoader

    from labs.common.data import BatchSampler, TokenFile, ensure_corpus
    from labs.common.model import build_model
    from labs.common.optim import make_optimizer
    from labs.common.pipeline import WindowDataset
    from labs.instruments.profiler import StepProfiler
    from labs.instruments.trace import TraceWindow
    from solutions.lab1_baseline import make_loader

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    data = TokenFile.open(ensure_corpus(256))
    dataset = WindowDataset(data.directory, 64, cost_s=1e-3)
    paths = []
    for name, make in (("in-process", lambda ds, b: iter(DataLoader(ds, batch_sampler=b))),
                       ("workers", lambda ds, b: iter(make_loader(ds, b, cpu)))):
        torch.manual_seed(0)
        model = build_model("tiny")
        opt = make_optimizer(model)
        sampler = BatchSampler(data.num_windows(64), 16)
        loader = make(dataset, [list(sampler.next_ids()) for _ in range(10)])
        prof = StepProfiler(cpu).attach(model, opt)
        path = RUNS / f"input-{name}" / "trace.json"
        with TraceWindow(path, cpu, wait=6, warmup=1, active=3) as trace:
            _loop(prof, trace, 10, lambda i, loader=loader: next(loader), model, opt)
        paths.append(path)
    return paths


def main() -> None:
    from labs.instruments.trace_plot import plot_traces

    IMG.mkdir(parents=True, exist_ok=True)
    plot_traces(lab2("bucketed"), steps=2, out=IMG / "trace-bucketed.png",
                title="lab 2, BucketedDDP (50 KB buckets), 2 ranks on gloo: all-reduces launched during backward")
    plot_traces(lab2("naive"), steps=2, out=IMG / "trace-naive.png",
                title="lab 2, NaiveDDP, 2 ranks on gloo: one blocking all-reduce per tensor, after backward")
    shutil.rmtree(RUNS / "straggler", ignore_errors=True)
    torchrun(Path(__file__).resolve(), "--straggler-worker")
    plot_traces([RUNS / "straggler" / f"trace-rank{r}.json" for r in (0, 1)], steps=2, out=IMG / "trace-straggler.png",
                title="a straggler: rank 1's data costs 25 ms more CPU per step; rank 0 waits for it in comm")
    plot_traces(input_stall(), labels=["num_workers=0", "num_workers=2"], align_each=True, steps=3,
                out=IMG / "trace-input-stall.png",
                title="lab 1's input pipeline (1 ms of CPU per sample): prepared in the training process vs in workers")
    for p in sorted(IMG.glob("trace-*.png")):
        print(f"wrote {p.relative_to(ROOT)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--straggler-worker", action="store_true", help=argparse.SUPPRESS)
    if ap.parse_args().straggler_worker:
        straggler_worker()
    else:
        main()
