# GENERATED from solutions/lab4_debugging/bandwidth.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""All-reduce bandwidth by message size: algbw and busbw, one line per size from rank 0.

    torchrun --standalone --nproc_per_node 2 -m labs.lab4_debugging.bandwidth --out bw.json
    # a slow link without root: every all-reduce paced to a 0.025 GB/s (= 200 Mbit/s) link
    torchrun --standalone --nproc_per_node 2 -m labs.lab4_debugging.bandwidth --emulate-rate-gbps 0.025
    # a real slow link (root): two network namespaces joined by a veth pair shaped to 200 Mbit/s
    python -m labs.lab4_debugging.slowlink --rate-mbit 200 -- \\
        python -m labs.lab4_debugging.bandwidth --max-bytes 4M

`python -m labs.lab4_debugging.bandwidth` alone is one process: nothing to all-reduce with,
so it says so and exits. Read the busbw column: it is comparable across world sizes and with
nccl-tests, and its plateau at large sizes is the link; small sizes are latency-bound.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.lab4_debugging.slowlink import slow_all_reduce

_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def parse_bytes(text: str) -> int:
    """'4K' -> 4096, '16M' -> 16777216, '100' -> 100."""
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * _UNITS[text[-1]]) if text[-1:] in _UNITS else int(text)


def sizes(lo: int, hi: int, factor: int = 4) -> list[int]:
    out = [lo]
    while out[-1] * factor <= hi:
        out.append(out[-1] * factor)
    return out


def bus_bandwidth(algbw: float, n: int) -> float:
    """busbw: the bytes each rank's link must carry, per second. A ring all-reduce sends
    2(n-1)/n * nbytes out of every rank ((n-1)/n reduce-scatter + (n-1)/n all-gather), so
    algbw * 2(n-1)/n is what to compare with the link's rate, at any n (as nccl-tests reports).
    n = 2: the factor is 1 (each rank sends nbytes), and a 200 Mbit/s link (25 MB/s each way)
    caps busbw at 0.025 GB/s; 8 ranks on such links would show algbw 0.014 and busbw 0.025."""
    return algbw * 2 * (n - 1) / n


def measure(env: cdist.DistEnv, nbytes: int, warmup: int, repeats: int, emulate=None) -> dict:
    """Median seconds of one all-reduce of `nbytes` (float32), and the two bandwidths."""
    t = torch.ones(nbytes // 4, device=env.device)
    times = []
    for i in range(warmup + repeats):
        dist.barrier()                 # start together: a late peer is not the link's fault
        cdist.synchronize(env.device)
        t0 = time.perf_counter()
        if emulate:
            slow_all_reduce(t, *emulate)
        else:
            dist.all_reduce(t)
        cdist.synchronize(env.device)  # on a GPU the call returns before the bytes have moved
        if i >= warmup:                # warm-up: first use of a size sets up buffers/connections
            times.append(time.perf_counter() - t0)
    sec = statistics.median(times)     # the median ignores the odd descheduled repeat
    algbw = nbytes / sec
    busbw = bus_bandwidth(algbw, env.world_size)
    return {"bytes": nbytes, "ms": round(sec * 1e3, 4), "algbw_GBps": round(algbw / 1e9, 5),
            "busbw_GBps": round(busbw / 1e9, 5)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--min-bytes", type=parse_bytes, default="4K")
    ap.add_argument("--max-bytes", type=parse_bytes, default="16M")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--emulate-rate-gbps", type=float, default=None,
                    help="pace each all-reduce to a link of this many GB/s (10^9 bytes/s; 0.025 = 200 Mbit/s)")
    ap.add_argument("--emulate-latency-ms", type=float, default=0.0,
                    help="with --emulate-rate-gbps: fixed cost added to every all-reduce")
    ap.add_argument("--device", choices=cdist.DEVICE_CHOICES, default="auto")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds any collective may wait")
    ap.add_argument("--out", default=None, help="write the rows as JSON here (rank 0)")
    args = ap.parse_args(argv)

    env = cdist.init(args.device, timeout_s=args.timeout)
    if not env.distributed:
        print("bandwidth.py: one process has no peer to all-reduce with. Launch 2 ranks: "
              "torchrun --standalone --nproc_per_node 2 -m labs.lab4_debugging.bandwidth", file=sys.stderr)
        return 2
    emulate = None
    if args.emulate_rate_gbps:
        emulate = (args.emulate_rate_gbps, args.emulate_latency_ms / 1e3)
    cdist.log(env, f"all-reduce, {env.world_size} ranks, {env.backend} on {cdist.device_name(env.device)}"
                   + (f", emulated link {emulate[0]:g} GB/s + {args.emulate_latency_ms:g} ms" if emulate else ""))
    rows = []
    for nbytes in sizes(args.min_bytes, args.max_bytes):
        row = measure(env, nbytes, args.warmup, args.repeats, emulate)
        rows.append(row)
        cdist.log(env, f"{nbytes:>10} B  {row['ms']:10.3f} ms  algbw {row['algbw_GBps']:8.4f} GB/s  "
                       f"busbw {row['busbw_GBps']:8.4f} GB/s")
    if env.is_main and args.out:
        with open(args.out, "w") as f:
            json.dump({"world_size": env.world_size, "backend": env.backend, "device": env.device.type,
                       "emulated": None if not emulate else {"rate_GBps": emulate[0], "latency_s": emulate[1]},
                       "rows": rows}, f, indent=1)
    cdist.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
