# GENERATED from solutions/lab4_debugging/linkprobe.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Which rank's link is slow? Every pair of ranks exchanges a buffer in turn, under the profiler.

Not an exercise: this makes the evidence `forensics.slow_rank` reads. An all-reduce is as slow as its slowest
link, and every rank waits in it equally long, so the all-reduce's own timings cannot say whose link it is.
Pairs can: rank i sends `nbytes` to rank j and back, pair after pair, while the others wait at a barrier. Each
transfer runs inside `torch.profiler.record_function("probe send I->J NBYTES B")` on the sender and `"probe recv
I->J NBYTES B"` on the receiver, and each rank writes its profiler trace (Chrome trace JSON, what
https://ui.perfetto.dev opens) to DIR/trace_rank<R>.json. A slow link shows on every pair that includes its rank.

    python -m labs.lab4_debugging.linkprobe                          # -> runs/lab4/link/trace_rank0..2.json
    python -m labs.lab4_debugging.linkprobe --slow-rank 1 --rate-gbps 0.05
    python -m labs.lab4_debugging.forensics --link runs/lab4/link    # your slow_rank on them

The slow link is emulated (no root needed): a transfer that touches the slow rank takes at least nbytes / rate,
as a link of that rate would carry it (slowlink.py's model; its netns + tbf link is the real thing, two ranks
only). Unthrottled, gloo over loopback moves 1 MiB in ~1 ms here (~1 GB/s).
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

WORLD = 3
NBYTES = 1 << 20   # 1 MiB per transfer: at 0.05 GB/s 21 ms, far above loopback's ~1 ms, so the link dominates
REPEATS = 3        # round trips per pair; the median ignores a descheduled one
TIMEOUT_S = 30.0


def rates(variant: int) -> tuple[int, float]:
    """(slow rank, its link's rate in GB/s) for a variant: the checker's hidden ones move both."""
    return (WORLD - 1 - variant % WORLD), (0.05, 0.02, 0.1, 0.03)[variant % 4]


def probe(out: Path, slow_rank: int, rate_gbps: float, nbytes: int = NBYTES, repeats: int = REPEATS) -> str:
    """One rank's part: every pair's round trips, profiled; returns the path of this rank's trace."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from labs.common import dist as cdist

    env = cdist.init("cpu", timeout_s=TIMEOUT_S)  # a CPU job: the timings are the subject, not the device
    rank = env.rank
    buf = torch.ones(nbytes // 4)

    def transfer(src: int, dst: int) -> None:
        slow = slow_rank in (src, dst)
        side = "send" if rank == src else "recv"
        with record_function(f"probe {side} {src}->{dst} {nbytes} B"):
            t0 = time.perf_counter()
            if rank == src:
                dist.send(buf, dst)
            else:
                dist.recv(buf, src)
            if slow:  # the emulated link: these bytes cannot cross it faster than nbytes / rate
                time.sleep(max(0.0, t0 + nbytes / (rate_gbps * 1e9) - time.perf_counter()))

    dist.barrier()  # connections set up before anything is timed
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i, j in itertools.combinations(range(env.world_size), 2):
            dist.barrier()  # one pair at a time: no transfer shares a link with another
            if rank in (i, j):
                for _ in range(repeats):
                    transfer(i, j)
                    transfer(j, i)
        dist.barrier()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"trace_rank{rank}.json"
    prof.export_chrome_trace(str(path))
    return str(path)


def main(argv=None) -> int:
    import argparse
    import subprocess

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--rank-job"]:
        cfg = json.loads(argv[1])
        probe(Path(cfg["out"]), cfg["slow_rank"], cfg["rate_gbps"])
        from labs.common import dist as cdist
        cdist.teardown()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slow-rank", type=int, default=rates(0)[0])
    ap.add_argument("--rate-gbps", type=float, default=rates(0)[1], help="the slow link's rate, GB/s (10^9 B/s)")
    ap.add_argument("--out", type=Path, default=Path("runs/lab4/link"))
    a = ap.parse_args(argv)
    cfg = {"out": str(a.out), "slow_rank": a.slow_rank, "rate_gbps": a.rate_gbps}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
           "--max-restarts=0", "-m", __spec__.name if __spec__ else "labs.lab4_debugging.linkprobe",
           "--rank-job", json.dumps(cfg)]
    rc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=180).returncode
    print(f"link probe: torchrun exit {rc}; traces in {a.out}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
