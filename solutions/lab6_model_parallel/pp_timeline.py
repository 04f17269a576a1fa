"""Pipeline schedules, timed: GPipe vs 1F1B on stages of known cost, and their activation memory on the GPT.

    torchrun --nproc_per_node 2 -m solutions.lab6_model_parallel.pp_timeline --out runs/lab6/pp.json
    torchrun --nproc_per_node 2 -m solutions.lab6_model_parallel.pp_timeline --micro-batches 1 2 4 8 16 32

Three measurements, written to --out (rank 0) for lab6.ipynb to draw:
    sleep   your pipeline_step on labs.instruments.stage_probe.SleepStage: each stage sleeps forward-ms per
            micro-batch forward and backward-ms per backward and records when each ran. The timeline of
            every rank, for each schedule and each micro-batch count (the least idle of --repeats steps:
            noise only ever adds idle time), gives the bubble vs (p-1)/(m+p-1).
    torch   the same stages driven by your torch_schedule (torch.distributed.pipelining), for comparison.
    gpt     the tiny GPT cut by your split_stages, one step per schedule: the bytes autograd holds for
            backward at their peak (labs.instruments.stage_probe.SavedTensorBytes). GPipe holds m micro-batches'
            activations on every stage, 1F1B at most p - stage of them.
Sleeping stages make the schedule, not the machine, what is timed: with 2 ranks on 2 busy cores a real
stage's compute varies by +-15%; a sleep by well under 1%, plus ~1 ms of wake-up when the cores are busy.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model, get_config
from labs.instruments.stage_probe import SavedTensorBytes, SleepStage

from .schedules import pipeline_step
from .stages import split_stages, sync_tied_grads
from .torch_pipeline import torch_schedule

WIDTH, MICRO_BATCH = 32, 2


def sleep_step(env, schedule: str, m: int, fwd_s: float, bwd_s: float, use_torch: bool = False) -> list[dict]:
    """One step of `schedule` over m micro-batches of SleepStage; this rank's events."""
    torch.manual_seed(0)  # the same data on every rank
    shape = (MICRO_BATCH, WIDTH)
    mbs = [(torch.randn(shape, device=env.device), torch.randn(shape, device=env.device)) for _ in range(m)]
    stage = SleepStage(WIDTH, fwd_s, bwd_s).to(env.device)
    if use_torch:
        sched = torch_schedule(stage, m, F.mse_loss, env.device, schedule)
        x, y = torch.cat([a for a, _ in mbs]), torch.cat([b for _, b in mbs])
        run = (lambda: sched.step(x)) if env.rank == 0 else (lambda: sched.step(target=y, losses=[]))
        run()  # the first step infers the shapes between stages: not the one timed
        stage.reset()
    else:
        run = lambda: pipeline_step(stage, mbs, F.mse_loss, shape, schedule)  # noqa: E731
    dist.barrier()
    run()
    cdist.synchronize(env.device)
    return stage.events


def gpt_activation_peak(env, schedule: str, m: int) -> int:
    """Peak bytes saved for backward on this rank's GPT stage during one step of `schedule`."""
    cfg = dataclasses.replace(get_config("tiny"), dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg).to(env.device)
    stage = split_stages(model, env.rank, env.world_size)
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    mbs = [data.batch(range(i * MICRO_BATCH, (i + 1) * MICRO_BATCH), cfg.block_size, env.device) for i in range(m)]

    def ce(logits, y):
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

    with SavedTensorBytes(stage) as saved:
        pipeline_step(stage, mbs, ce, (MICRO_BATCH, cfg.block_size, cfg.n_embd), schedule)
    sync_tied_grads(stage)
    return saved.peak


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--forward-ms", type=float, default=15.0)
    ap.add_argument("--backward-ms", type=float, default=30.0, help="backward ~2x forward, as in a real model")
    ap.add_argument("--repeats", type=int, default=2, help="steps per point; the least idle one is kept")
    ap.add_argument("--draw-m", type=int, default=4, help="micro-batches of the torch schedules' timelines")
    ap.add_argument("--gpt-m", type=int, default=8, help="micro-batches of the GPT activation measurement")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=Path("runs/lab6/pp.json"))
    args = ap.parse_args(argv)
    env = cdist.init(args.device)
    fwd_s, bwd_s = args.forward_ms / 1e3, args.backward_ms / 1e3
    out = {"p": env.world_size, "forward_s": fwd_s, "backward_s": bwd_s, "sleep": {}, "torch": {}, "gpt": {}}
    for schedule in ("gpipe", "1f1b"):
        sleep_step(env, schedule, 2, fwd_s, bwd_s)  # warm-up: first sends, first autograd
        out["sleep"][schedule] = {m: [sleep_step(env, schedule, m, fwd_s, bwd_s) for _ in range(args.repeats)]
                                  for m in args.micro_batches}
        out["torch"][schedule] = sleep_step(env, schedule, args.draw_m, fwd_s, bwd_s, use_torch=True)
        out["gpt"][schedule] = {"m": args.gpt_m, "peak_bytes": gpt_activation_peak(env, schedule, args.gpt_m)}
    every = [None] * env.world_size
    dist.all_gather_object(every, out)
    if env.is_main:
        from labs.instruments.schedule_timeline import bubble_fraction, ideal_bubble
        merged = {k: out[k] for k in ("p", "forward_s", "backward_s")}
        merged["sleep"] = {s: {m: min(([r["sleep"][s][m][k] for r in every] for k in range(args.repeats)),
                                      key=bubble_fraction) for m in args.micro_batches} for s in out["sleep"]}
        merged["torch"] = {s: [r["torch"][s] for r in every] for s in out["torch"]}
        merged["gpt"] = {s: {"m": args.gpt_m, "peak_bytes": [r["gpt"][s]["peak_bytes"] for r in every]}
                         for s in out["gpt"]}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(merged))
        for s, by_m in merged["sleep"].items():
            cdist.log(env, f"{s:5s} bubble (formula) " + "  ".join(
                f"m={m}: {bubble_fraction(r):.3f} ({ideal_bubble(env.world_size, m):.3f})" for m, r in by_m.items()))
        for s, g in merged["gpt"].items():
            cdist.log(env, f"{s:5s} GPT m={g['m']}: activations at peak per stage "
                           + ", ".join(f"{b / 1e6:.2f} MB" for b in g["peak_bytes"]))
    cdist.teardown()


if __name__ == "__main__":
    main()
