"""`python -m checker.spawn --nproc N -- CMD...`: start N ranks of CMD on this machine, without torchrun.

What torchrun's agent does for a single-node job, minus the agent: one free port for the
rendezvous, and RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT in each rank's environment
(`init_process_group()`'s env:// reads them). It imports nothing but the standard library, so a run
costs N torch imports instead of N + 1 (~2 s of CPU each on these cores; lab 4 launches ~20 runs).
The port is chosen below the OS's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 here) and
checked free by binding it. It must be: it is released before rank 0's store binds it, seconds later
(rank 0 imports torch first), and a port from bind(0) is in the ephemeral range, where every gloo
listener and outgoing connection of the runs alongside also gets its port: one of them can take it in
that window (EADDRINUSE). Below the range nothing takes a port unless it names it.

If a rank fails, its peers get GRACE_S to report their own view (they usually fail a collective a
moment later), then every rank is killed: a run never waits out a peer that cannot finish.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time

GRACE_S = 3.0
LOWEST_PORT = 20000  # above the registered services most machines run


def _ephemeral_low() -> int:
    try:
        return int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default (macOS starts at 49152)


def _bindable(port: int) -> bool:
    with socket.socket() as s:  # on every address, as the store listens
        try:
            s.bind(("", port))
            return True
        except OSError:
            return False


def free_port() -> int:
    """A free TCP port below the ephemeral range (see above), or, where there is no room below it, one
    from the OS."""
    rng, low = random.SystemRandom(), _ephemeral_low()
    if low > LOWEST_PORT + 1000:
        for _ in range(200):
            port = rng.randrange(LOWEST_PORT, low)
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def rank_env(rank: int, nproc: int, port: int) -> dict[str, str]:
    """What torchrun's agent puts in each rank's environment for a single-node job."""
    return {"RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def supervise(procs: list) -> int:
    """Wait for every rank (objects with poll() and send_signal(), as Popen has); once one fails, its
    peers get GRACE_S, then SIGKILL. Returns the exit status of the first rank that failed, else 0."""
    failed_at, first = None, 0
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at, first = time.monotonic(), next(c for c in codes if c not in (None, 0))
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGKILL)
        time.sleep(0.05)
    # The first rank to fail is the root cause (its peers were killed after it); a signal as the shell shows it.
    first = first or next((c for c in codes if c), 0)
    return 128 - first if first < 0 else first


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    port = free_port()
    return supervise([subprocess.Popen(cmd, env={**os.environ, **rank_env(rank, a.nproc, port)})
                      for rank in range(a.nproc)])


if __name__ == "__main__":
    sys.exit(main())
