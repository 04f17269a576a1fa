"""Both nodes of the lab on this machine: two network namespaces and a tbf-shaped veth (root), or loopback.

    sudo .venv/bin/python -m solutions.lab8_multinode.nodes --rate-mbit 400 --strategy fsdp
    .venv/bin/python -m solutions.lab8_multinode.nodes          # no root: both nodes on loopback

Each node's torchrun gets your torchrun_args; it runs train.py. Nothing outlives the script: the
namespaces are deleted (netns_link), every torchrun is killed with its workers.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys

from solutions.lab4_debugging.slowlink import cleanup_stale, netns_available, netns_link

from .launch import torchrun_args


def run(link, args) -> int:
    host = link.addr[0] if link else "127.0.0.1"
    port = random.randrange(20000, 30000)
    procs = []
    try:
        for g in range(2):
            addr = link.addr[g] if link else host
            argv = [sys.executable, "-m", "torch.distributed.run",
                    *torchrun_args(2, 2, g, f"{host}:{port}", f"lab8-{port}", 0, addr),
                    "-m", __package__ + ".train", "--strategy", args.strategy, "--steps", str(args.steps),
                    "--device", "cpu"]
            procs.append(subprocess.Popen(link.command(g, argv) if link else argv, start_new_session=True))
        return max(abs(p.wait(timeout=args.timeout)) for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate-mbit", type=float, default=400)
    ap.add_argument("--strategy", choices=["fsdp", "hsdp"], default="hsdp")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    ok, why = netns_available()
    if not ok:
        print(f"emulated: both nodes on loopback ({why})", flush=True)
        return run(None, args)
    cleanup_stale()
    with netns_link(args.rate_mbit) as link:
        return run(link, args)


if __name__ == "__main__":
    sys.exit(main())
