# GENERATED from solutions/lab4_debugging/job.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""The training job all eight incidents run: the tiny GPT under torch DDP, one rank per process.

Not an exercise. Each incidentN.py holds one piece of this job as a teammate wrote it; under
the right conditions (a node shared with another job, a NaN on one rank, a preemption, a slow
link...) that piece breaks the job. `python -m labs.lab4_debugging.run N` recreates incident N's
conditions and launches the job; your fix goes into incidentN.py.

What the job logs is what you diagnose from (rank 0 unless the line says [rank=R]):
  link check    one 1 MB all-reduce before training: the bus bandwidth this job actually gets
  step lines    loss, step time, bucket all-reduces and bytes per step
  rank times    every few steps an all_gather of each rank's seconds inside train_step and outside
                it: a straggler is the rank with time *outside* while the others wait *inside*
"""
from __future__ import annotations

import faulthandler
import math
import os
import signal
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model, get_config
from labs.common.optim import make_optimizer

from . import incident1, incident2, incident3, incident4, incident5, incident6, incident8
from .slowlink import delay_comm_hook, slow_all_reduce


@dataclass
class Job:
    steps: int = 12                 # optimizer steps (the epoch may end first: see num_samples)
    batch: int = 4                  # sequences per micro-batch per rank
    seq: int = 64
    micro_batches: int = 1          # gradient accumulation
    seed: int = 0
    timeout_s: float = 30.0         # process-group timeout: a hang becomes an error after this long
    num_samples: int = 0            # windows in the epoch; 0: world * batch * micro_batches * steps
    eval_every: int = 4
    dashboard_rank: int = 0         # the rank that feeds the team's dashboard
    nan_at: tuple[int, int] | None = None    # (rank, step): that rank's loss is bad_loss at that step
    bad_loss: str = "nan"           # "nan" (a corrupt sample) or "inf" (an overflow)
    link_gbps: float | None = None  # emulate a slow link (in-process delay around each all-reduce)
    link_latency_ms: float = 1.0
    ckpt: str | None = None
    save_at: int | None = None      # checkpoint after this step (incident 5)
    save_every: int = 0             # and again every this many steps after it (0: once)
    resume: bool = False
    rank_times_every: int = 4
    bucket_cap_mb: float = 0.25     # tiny's 0.48 MB of fp32 gradients -> 2 buckets


@dataclass
class Result:
    losses: list[float] = field(default_factory=list)
    steps_run: int = 0
    skipped: list[int] = field(default_factory=list)
    evals: int = 0
    eval_steps: list[int] = field(default_factory=list)  # the steps after which after_step validated
    seconds_in_step: float = 0.0
    seconds_outside: float = 0.0
    allreduces: int = 0
    start: int = 0


def _link_check(env, job: Job) -> None:
    """Measure before you train: one 1 MB all-reduce. busbw = bytes * 2(n-1)/n / time, because a ring
    all-reduce sends and receives 2(n-1)/n of the buffer per rank whatever n is."""
    t = torch.ones(2**18, device=env.device)  # 2^18 fp32 = 1 MiB
    reduce = ((lambda x: slow_all_reduce(x, job.link_gbps, job.link_latency_ms / 1e3)) if job.link_gbps
              else dist.all_reduce)
    reduce(t)  # warm-up: connections, buffers
    cdist.synchronize(env.device)
    t0 = time.perf_counter()
    for _ in range(3):
        reduce(t)
    cdist.synchronize(env.device)
    dt = (time.perf_counter() - t0) / 3
    n = env.world_size
    cdist.log(env, f"link check: 1.0 MB all-reduce in {dt * 1e3:.1f} ms = "
                   f"{2**20 * 2 * (n - 1) / n / dt / 1e9:.3f} GB/s "
                   f"bus bandwidth ({env.backend}, {n} ranks)")


def _log_launch() -> None:
    """Every rank says who launched it and with what, before anything can hang: the first lines to read."""
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
            "NCCL_SOCKET_IFNAME", "COURSE_IFNAME", "SLURM_NTASKS", "SLURM_PROCID")
    seen = " ".join(f"{k}={os.environ[k]}" for k in keys if k in os.environ)
    print(f"[rank={os.environ.get('RANK', 0)}] launch environment: {seen}", flush=True)


def _counting_hook(counter: dict, inner=None):
    """DDP communication hook: count bucket all-reduces and bytes, then do what `inner` (or the default) does."""
    def hook(state, bucket):
        counter["calls"] += 1
        counter["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
        if inner is not None:
            return inner(state, bucket)
        buf = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda fut: fut.value()[0])
    return hook


def run(job: Job, log_every: int = 1, on_saved=None) -> dict:
    """Train; return this rank's Result as a dict plus the final model (key "model")."""
    _log_launch()
    incident6.configure_network(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    env = incident1.join(job.timeout_s)
    cdist.log(env, f"joined: world size {env.world_size}, backend {env.backend}, device {env.device}")
    _link_check(env, job)

    torch.manual_seed(job.seed)
    model = build_model(get_config("tiny")).to(env.device)
    ddp = DDP(model, device_ids=cdist.ddp_device_ids(env.device), bucket_cap_mb=job.bucket_cap_mb)
    counter = {"calls": 0, "bytes": 0}
    link = delay_comm_hook(job.link_gbps, job.link_latency_ms / 1e3) if job.link_gbps else None
    ddp.register_comm_hook(None, _counting_hook(counter, link))
    opt = make_optimizer(ddp.module)
    data = TokenFile.open(ensure_corpus(256))
    res = Result()
    if job.resume:
        res.start = incident5.load_checkpoint(job.ckpt, ddp, opt)
        held = sum(1 for p in ddp.module.parameters() if opt.state.get(p))
        cdist.log(env, f"resumed from {os.path.basename(job.ckpt)} at step {res.start}: the optimizer holds state "
                       f"for {held} of {len(list(ddp.module.parameters()))} parameters")

    n = job.num_samples or env.world_size * job.batch * job.micro_batches * job.steps
    ids = incident4.shard_indices(n, env.rank, env.world_size)
    per_step = job.batch * job.micro_batches
    n_steps = min(job.steps, math.ceil(len(ids) / per_step))  # the last batch may be short: no sample wasted
    cdist.log(env, f"{len(ids)} samples this epoch -> {n_steps} steps", all_ranks=True)
    window = torch.Generator().manual_seed(job.seed + 1)
    perm = torch.randperm(data.num_windows(job.seq), generator=window)  # sample id -> window of the corpus

    for step in range(res.start + 1, n_steps + 1):
        t0 = time.perf_counter()
        mine = ids[(step - 1) * per_step: step * per_step]
        micro = [data.batch(perm[mine[i:i + job.batch]].numpy(), job.seq, env.device)
                 for i in range(0, len(mine), job.batch)]
        poison = None
        if job.nan_at is not None and tuple(job.nan_at) == (env.rank, step):  # a bad sample, an overflow...
            poison = ddp.module.register_forward_hook(
                lambda m, inp, out, bad=float(job.bad_loss): (out[0], out[1] * bad))
        calls0 = counter["calls"]
        t1 = time.perf_counter()
        loss = incident8.train_step(ddp, opt, micro)
        if poison is not None:
            poison.remove()
        cdist.synchronize(env.device)
        t2 = time.perf_counter()
        if incident2.skip_step(loss, step, env.device):
            opt.zero_grad(set_to_none=True)
            res.skipped.append(step)
            cdist.log(env, f"step {step}: non-finite loss on some rank; update skipped", all_ranks=True)
        else:
            opt.step()
        val = incident3.after_step(ddp.module, step, job, data, env)
        if val is not None:
            res.evals += 1
            res.eval_steps.append(step)
        t3 = time.perf_counter()
        res.seconds_in_step += t2 - t1
        res.seconds_outside += (t1 - t0) + (t3 - t2)
        res.losses.append(loss)
        res.steps_run += 1
        if step % log_every == 0:
            cdist.log(env, f"step {step} loss {loss:.4f} {1e3 * (t3 - t0):.0f} ms "
                           f"{counter['calls'] - calls0} all-reduces")
        if job.rank_times_every and step % job.rank_times_every == 0:
            _rank_times(env, res, step)
        if job.save_at is not None and (step == job.save_at or job.save_every and step > job.save_at
                                        and (step - job.save_at) % job.save_every == 0):
            incident5.save_checkpoint(job.ckpt, ddp, opt, step)
            cdist.log(env, f"step {step}: checkpoint written")
            if os.environ.get("LAB4_WAIT_FOR_KILL"):  # run.py's preempted job: its SIGKILL lands here, after the
                time.sleep(120)                        # save, even when a loaded machine delivers it late
            if on_saved is not None:
                on_saved()
    res.allreduces = counter["calls"]
    return {**asdict(res), "model": ddp.module, "env": env}


def _rank_times(env, res: Result, step: int) -> None:
    """all_gather each rank's seconds inside train_step (compute + waiting for the all-reduce) and outside
    it (data, eval, logging): the straggler is busy outside while its peers wait inside."""
    mine = torch.tensor([res.seconds_in_step, res.seconds_outside], dtype=torch.float64, device=env.device)
    every = [torch.zeros_like(mine) for _ in range(env.world_size)]
    dist.all_gather(every, mine)
    inside = " ".join(f"r{r}={t[0].item():.2f}" for r, t in enumerate(every))
    outside = " ".join(f"r{r}={t[1].item():.2f}" for r, t in enumerate(every))
    cdist.log(env, f"rank times after step {step}: inside train_step s {inside} | outside s {outside}")


def main(argv=None) -> int:
    """`python -m labs.lab4_debugging.job --job '{"steps": 12}'` under torchrun (run.py builds the command)."""
    import argparse
    import json

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # run.py asks a hung rank for its stack
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", default="{}", help="Job fields as JSON")
    job = Job(**json.loads(ap.parse_args(argv).job))
    out = run(job)
    cdist.log(out["env"], f"done: {out['steps_run']} steps, final loss {out['losses'][-1]:.4f}" if out["losses"]
              else "done: no steps")
    cdist.teardown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
