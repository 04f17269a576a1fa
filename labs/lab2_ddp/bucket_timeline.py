# GENERATED from solutions/lab2_ddp/bucket_timeline.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""When does each bucket's all-reduce start and finish, relative to backward? (lab2.ipynb plots it)

    torchrun --nproc_per_node 2 -m labs.lab2_ddp.bucket_timeline --bucket-mb 0.05 --out runs/timeline.json

Times one training step of BucketedDDP after two warm-up steps (milliseconds from the start of
forward): the end of forward, the end of backward, and for
every bucket the moment its all-reduce was launched (from the grad hook) and the moment
finish_gradient_synchronization() had it back. A bucket launched long before backward ends is
communication hidden behind compute; whatever finishes after backward is exposed.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch.distributed as dist

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model

from .bucketed import BucketedDDP


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--bucket-mb", type=float, default=0.05)
    ap.add_argument("--out", default="runs/timeline.json")
    args = ap.parse_args(argv)
    env = cdist.init()
    model = build_model(args.config).to(env.device)
    data = TokenFile.open(ensure_corpus(model.cfg.vocab_size))
    ddp = BucketedDDP(model, bucket_cap_mb=args.bucket_mb)
    launches = []
    original = dist.all_reduce

    def recording_all_reduce(tensor, *a, **kw):  # every bucket's launch goes through here
        launches.append((time.perf_counter(), tensor.numel() * tensor.element_size()))
        return original(tensor, *a, **kw)

    dist.all_reduce = recording_all_reduce
    x, y = data.batch(range(env.rank * 16, env.rank * 16 + 16), 64, env.device)
    for _ in range(3):  # two warm-ups, then the timed step
        launches.clear()
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = ddp(x, y)[1]
        t_fwd = time.perf_counter()
        loss.backward()
        t_bwd = time.perf_counter()
        done = []
        for b in ddp.buckets:  # wait bucket by bucket to see when each is back
            b.work.wait()
            done.append(time.perf_counter())
        ddp.finish_gradient_synchronization()
    dist.all_reduce = original
    if env.is_main:
        ms = lambda t: round(1e3 * (t - t0), 3)  # noqa: E731
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"forward_ms": ms(t_fwd), "backward_ms": ms(t_bwd), "world_size": env.world_size,
                                   "buckets": [{"bytes": n, "launched_ms": ms(t), "done_ms": ms(d)}
                                               for (t, n), d in zip(launches, done)]}, indent=1))
        early = sum(t < t_bwd for t, _ in launches)
        exposed = max(0.0, max(done, default=t_bwd) - t_bwd)
        cdist.log(env, f"wrote {out}: {len(launches)} buckets, {sum(n for _, n in launches) / 2**20:.2f} MiB; "
                       f"{early} launched before backward ended (at {ms(t_bwd):.1f} ms); {1e3 * exposed:.1f} ms of "
                       "communication exposed after it")
    cdist.teardown()


if __name__ == "__main__":
    main()
