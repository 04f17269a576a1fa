"""Lab 8's two "nodes": one torchrun agent per node, each in its own network namespace (root) or both on
this machine's loopback (no root), started by the checker as a cluster's scheduler would start them.

    python -m checker.labs.lab8.nodes SPEC.json      (the checker starts it; a run of checker/harness.py)

SPEC: {"nodes": [{"ns": name or null, "torchrun": [options], "env": {...}}, ...], "worker": [argv],
       "kill": null or {"cue": path, "node": 1, "mark": path}}
With "kill", once the cue file appears every worker of that node is SIGKILLed at once, as when a node's
training processes are lost (OOM killer, a GPU fault, a kernel panic the agent survives in a container
restart); the node's torchrun agent stays, as Slurm or Kubernetes restart it, and the time of the kill goes
to `mark`. torchrun (--max-restarts) must then restart the workers of both nodes. Every torchrun is its own
process group, killed on every way out of this process (the harness kills this process's tree and reaps it as
well).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from labs.instruments import proctree

# Two agents on one machine meet in a few seconds (torch imported, a TCP store joined; ~10 s on 2 loaded cores):
# one that has started no worker after this long never will (its join timeout is 600 s), so the run ends here.
RENDEZVOUS_S = 40.0


def _start(node: dict, worker: list[str], log) -> subprocess.Popen:
    argv = [sys.executable, "-m", "torch.distributed.run", *node["torchrun"], *worker]
    if node.get("ns"):
        argv = ["ip", "netns", "exec", node["ns"], *argv]
    return subprocess.Popen(argv, env={**os.environ, **node.get("env", {})}, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _killpg(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    kill = spec.get("kill")
    procs: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # the finally below runs
    try:
        procs = [_start(n, spec["worker"], sys.stdout) for n in spec["nodes"]]
        t0, started, looked = time.monotonic(), [False] * len(procs), 0.0
        while any(p.poll() is None for p in procs):
            if not all(started) and time.monotonic() - looked >= 1.0:  # an agent starts workers after rendezvous
                looked = time.monotonic()
                started = [s or bool(proctree.descendants(p.pid)) for s, p in zip(started, procs)]
                if not all(started) and looked - t0 > RENDEZVOUS_S:
                    waiting = [n for n, s in enumerate(started) if not s]
                    print(f"[checker] no rendezvous: node(s) {waiting} started no worker within {RENDEZVOUS_S:.0f} s "
                          "of launch; their agents are still waiting to meet the others (do both nodes reach the "
                          "rendezvous endpoint, and does each advertise an address the other can reach?)", flush=True)
                    return 3
            if kill and Path(kill["cue"]).exists():
                n = kill["node"]
                workers = proctree.descendants(procs[n].pid)
                for pid in workers:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                Path(kill["mark"]).write_text(repr(time.time()))
                print(f"[checker] node {n} lost its {len(workers)} training processes (SIGKILL)", flush=True)
                kill = None
            if any(p.returncode not in (None, 0) for p in procs):
                # the other node's agent sees its peer gone and exits by itself (up to 2 s), or is stopped
                deadline = time.monotonic() + 2.0
                while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                    time.sleep(0.05)
                break
            time.sleep(0.05)
        return max(abs(p.returncode or 0) for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                _killpg(p)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
