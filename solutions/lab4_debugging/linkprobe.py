"""Which rank's link is slow? Every pair of ranks exchanges a buffer in turn, under the profiler.

Not an exercise: this makes the evidence `forensics.slow_rank` reads. An all-reduce is as slow as its slowest
link, and every rank waits in it equally long, so the all-reduce's own timings cannot say whose link it is.
Pairs can: rank i sends `nbytes` to rank j and back, pair after pair, while the others wait at a barrier. Each
transfer (the bytes, then the receiver's 4-byte acknowledgement) runs inside
`torch.profiler.record_function("probe send I->J NBYTES B")` on the sender and `"probe recv I->J NBYTES B"` on
the receiver, and each rank writes its profiler trace (Chrome trace JSON, what
https://ui.perfetto.dev opens) to DIR/trace_rank<R>.json. A slow link shows on every pair that includes its rank.

    python -m labs.lab4_debugging.linkprobe                          # -> runs/lab4/link/trace_rank0..2.json
    python -m labs.lab4_debugging.linkprobe --slow-rank 1 --rate-gbps 0.05
    python -m labs.lab4_debugging.forensics --link runs/lab4/link    # your slow_rank on them

The slow link is emulated (no root needed): a transfer that touches the slow rank takes at least nbytes / rate,
as a link of that rate would carry it (slowlink.py's model). Unthrottled, gloo over loopback moves 4 MiB and its
ack in ~7 ms here (0.57 GB/s, a busy machine). As root, `--netns-rate-mbit R` runs it over a real link instead: one
network namespace per rank on a bridge (slowlink.Star), the slow rank's cable tbf-shaped to R.

    sudo .venv/bin/python -m labs.lab4_debugging.linkprobe --slow-rank 1 --netns-rate-mbit 200
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

WORLD = 3
NBYTES = 4 << 20   # 4 MiB per transfer: at 0.05 GB/s 84 ms (42 ms at the fastest hidden rate, 0.1), far above
#                    loopback's ~5 ms and above what a busy CPU adds to a transfer (each of its four hand-overs can
#                    wait a scheduler's slice: at 1 MiB, 21 ms, a load of 15 on 2 cores made a fast pair look slow)
REPEATS = 3        # round trips per pair; the median ignores a descheduled one
TIMEOUT_S = 30.0


def rates(variant: int) -> tuple[int, float]:
    """(slow rank, its link's rate in GB/s) for a variant: the checker's hidden ones move both."""
    return (WORLD - 1 - variant % WORLD), (0.05, 0.02, 0.1, 0.03)[variant % 4]


def netns_rates(variant: int) -> tuple[int, float]:
    """(slow rank, its cable's tbf rate in Mbit/s) for the real link, moved by the variant as rates() is."""
    return (variant + 1) % WORLD, (200.0, 400.0, 100.0)[variant % 3]


def probe(out: Path, slow_rank: int, rate_gbps: float, nbytes: int = NBYTES, repeats: int = REPEATS) -> str:
    """One rank's part: every pair's round trips, profiled; returns the path of this rank's trace."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from labs.common import dist as cdist

    env = cdist.init("cpu", timeout_s=TIMEOUT_S)  # a CPU job: the timings are the subject, not the device
    rank = env.rank
    buf = torch.ones(nbytes // 4)

    ack = torch.zeros(1)

    def transfer(src: int, dst: int) -> None:
        """The receiver acknowledges with 4 bytes: a send returns once the kernel has buffered the bytes, long
        before they cross a slow link, so without the ack the sender's span would be too short and the next
        receive's too long (measured over the tbf link: 1 ms and 80 ms for a 42 ms transfer)."""
        side = "send" if rank == src else "recv"
        with record_function(f"probe {side} {src}->{dst} {nbytes} B"):
            t0 = time.perf_counter()
            if rank == src:
                dist.send(buf, dst)
                dist.recv(ack, dst)
            else:
                dist.recv(buf, src)
                if slow_rank in (src, dst):  # the emulated link: these bytes cannot cross it faster than this
                    time.sleep(max(0.0, t0 + nbytes / (rate_gbps * 1e9) - time.perf_counter()))
                dist.send(ack, src)

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


def _real(out: Path, slow_rank: int, rate_mbit: float) -> int:
    """The probe over a real shaped link: every rank in its own network namespace (slowlink.Star), nothing
    emulated (rate_gbps 0 below turns the emulation off: the tbf queue is the slow link)."""
    from .slowlink import cleanup_stale, netns_available, netns_star, run_two_nodes

    ok, why = netns_available()
    if not ok:
        print(why, file=sys.stderr)
        return 2
    cleanup_stale()
    cfg = {"out": str(out), "slow_rank": -1, "rate_gbps": 0}  # -1: no rank's transfers are paced in-process
    argv = [sys.executable, "-m", __spec__.name if __spec__ else "labs.lab4_debugging.linkprobe", "--rank-job",
            json.dumps(cfg)]
    with netns_star(WORLD, slow_rank, rate_mbit) as star:
        results = run_two_nodes(star, argv, timeout_s=120, env_extra={"OMP_NUM_THREADS": "1"}, cwd=os.getcwd())
    for rank, r in enumerate(results):
        if r.returncode:
            print(f"[rank={rank}] exit {r.returncode} {r.killed}\n{r.stderr[-2000:]}", file=sys.stderr)
    rc = max(abs(r.returncode) for r in results)
    print(f"link probe over namespaces, rank {slow_rank}'s cable at {rate_mbit:g} Mbit/s "
          f"({rate_mbit / 8e3:g} GB/s): exit {rc}; traces in {out}")
    return rc


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
    ap.add_argument("--netns-rate-mbit", type=float, default=None,
                    help="root: a real link instead: one namespace per rank on a bridge, the slow rank's cable "
                         "tbf-shaped to this rate (200 = 0.025 GB/s)")
    a = ap.parse_args(argv)
    if a.netns_rate_mbit:
        return _real(a.out.resolve(), a.slow_rank, a.netns_rate_mbit)
    cfg = {"out": str(a.out), "slow_rank": a.slow_rank, "rate_gbps": a.rate_gbps}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
           "--max-restarts=0", "-m", __spec__.name if __spec__ else "labs.lab4_debugging.linkprobe",
           "--rank-job", json.dumps(cfg)]
    rc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=180).returncode
    print(f"link probe: torchrun exit {rc}; traces in {a.out}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
