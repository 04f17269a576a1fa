"""The rendezvous port of a requeued job's first run, still taken when its next run starts.

train.sbatch's contract: every run finds a rendezvous endpoint that is free now, not one fixed in the script. A
port is not the job's to keep: another job on the node, or a process of the previous run that has not gone yet,
may hold it when the job comes back from a requeue. The checker plays that part. While run 1 trains it reads the
port run 1's torchrun was given (its command line, through `scontrol listpids`), and once the job is PENDING after
the requeue (run 1 gone, run 2 not yet started: ~6 s here) it binds and listens on that port until the grade ends,
closing every connection it gets. A script that chooses a free port each run picks another one; a fixed port makes
run 2's torchrun find it taken (its rendezvous store cannot bind; as a client it is hung up on), and run 2 fails.

Only where the checker shares the node with the job (`make slurm-up`): on a cluster's login node listpids answers
nothing and nothing is held. Cost: none to a script that passes.
"""
from __future__ import annotations

import re
import socket
import subprocess
import threading
from pathlib import Path

_PORT_OPTS = re.compile(r"^--(?:rdzv[-_]endpoint|master[-_]port)(?:=(\S+))?$")


def rendezvous_port(job: str) -> int | None:
    """The port on the command line of the job's torchrun (--rdzv-endpoint=HOST:PORT or --master-port=PORT), or None
    when this machine does not run the job or no torchrun names one."""
    try:
        r = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines()[1:]:
        pid = line.split()[0] if line.split() else ""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        for i, arg in enumerate(argv):
            m = _PORT_OPTS.match(arg)
            if m:
                value = m[1] if m[1] is not None else (argv[i + 1] if i + 1 < len(argv) else "")
                port = value.rsplit(":", 1)[-1]
                if port.isdigit():
                    return int(port)
    return None


class PortHold:
    """Listen on `port` (all addresses) and hang up on whoever connects, until close()."""

    def __init__(self):
        self.port: int | None = None
        self._sock: socket.socket | None = None

    def take(self, port: int) -> bool:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the previous run's connections in TIME_WAIT
        try:
            s.bind(("", port))
            s.listen(16)
        except OSError:
            s.close()
            return False
        self.port, self._sock = port, s
        threading.Thread(target=self._hang_up, daemon=True).start()
        return True

    def _hang_up(self) -> None:
        while self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        s, self._sock = self._sock, None
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes the accept() of _hang_up
            except OSError:
                pass
            s.close()
