"""A slow link between two "nodes", made real where we can and emulated where we cannot.

Real (root, Linux, iproute2): two network namespaces joined by a veth pair, each end shaped by
`tc qdisc ... tbf`. Each rank runs in its own namespace, so gloo's bytes really cross the link.

    python -m solutions.lab4_debugging.slowlink --rate-mbit 200 -- \\
        python -m solutions.lab4_debugging.bandwidth --max-bytes 4M

Emulated (no root): `delay_comm_hook` for DDP and `slow_all_reduce` for plain all-reduces make
each collective take as long as it would on a link of the given rate and latency.

Why tbf and not netem: netem (delay/loss) is a separate kernel module that many cloud and CI
kernels leave out ("Specified qdisc kind is unknown"); tbf (token bucket) and htb are built in.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

PREFIX = "dtl4"  # every namespace and veth this course makes starts with it (cleanup_stale looks for it)
_PID_W = 5       # pid in base 36, 5 chars: 36**5 = 60M > Linux's pid_max ceiling of 4,194,304


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if check and p.returncode:
        raise RuntimeError(f"`{' '.join(argv)}` failed ({p.returncode}): {p.stderr.strip()}")
    return p


def _tag(pid: int | None = None) -> str:
    """PREFIX + pid + 3 random chars = 12 chars; a veth name adds 2 (`v0`) = 14, under the kernel's
    15-char IFNAMSIZ limit. The pid tells cleanup_stale whether the owner is still alive."""
    digits, n = "0123456789abcdefghijklmnopqrstuvwxyz", pid or os.getpid()
    pid36 = "".join(digits[(n // 36 ** i) % 36] for i in reversed(range(_PID_W)))
    return PREFIX + pid36 + "".join(random.choices(digits, k=3))


@dataclass
class Link:
    """Two namespaces (rank 0's, rank 1's), the veth end in each, and each end's address."""
    tag: str
    ns: tuple[str, str] = field(init=False)
    veth: tuple[str, str] = field(init=False)
    addr: tuple[str, str] = field(init=False)
    rate_mbit: float | None = None
    world: int = field(init=False, default=2)

    def __post_init__(self):
        self.ns = (f"{self.tag}-n0", f"{self.tag}-n1")
        self.veth = (f"{self.tag}v0", f"{self.tag}v1")
        # The namespaces are private, so addresses cannot clash with other links or the host; a
        # random /30 (4 addresses: network, .1, .2, broadcast) just keeps `ip` output distinguishable.
        a, b = random.randrange(64, 250), random.randrange(0, 64) * 4
        self.addr = (f"10.{a}.{b}.1", f"10.{a}.{b}.2")

    def command(self, rank: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[rank], *argv]

    def env(self, rank: int, master_port: int) -> dict[str, str]:
        """torchrun's variables for a 2-node job, one rank per node. GLOO_SOCKET_IFNAME pins gloo to
        the veth: without it gloo picks the address the hostname resolves to, which need not exist
        in the namespace. (NCCL on one host would skip the network for shared memory/P2P; to put
        GPU traffic on this link you would also need NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1.)"""
        return {"MASTER_ADDR": self.addr[0], "MASTER_PORT": str(master_port), "RANK": str(rank),
                "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "GLOO_SOCKET_IFNAME": self.veth[rank]}

    def create(self, burst_kb: int = 64, latency_ms: int = 50) -> None:
        for r in (0, 1):
            _run("ip", "netns", "add", self.ns[r])
            _run("ip", "-n", self.ns[r], "link", "set", "lo", "up")
        # Created inside ns 0, then one end moved: a crash leaves nothing in the host's namespace.
        _run("ip", "-n", self.ns[0], "link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1])
        _run("ip", "-n", self.ns[0], "link", "set", self.veth[1], "netns", self.ns[1])
        for r in (0, 1):
            _run("ip", "-n", self.ns[r], "addr", "add", f"{self.addr[r]}/30", "dev", self.veth[r])
            _run("ip", "-n", self.ns[r], "link", "set", self.veth[r], "up")
            if self.rate_mbit:
                # tbf shapes egress only, hence one per end. 200 mbit = 25 MB/s each way. burst: tc-tbf(8)
                # wants >= rate/HZ = 25 MB/s / 250..1000 Hz = 25..100 KB; 64 KB gave 0.0234 GB/s of
                # the 0.025 here. latency: the queue holds rate*latency = 25 MB/s * 50 ms = 1.25 MB;
                # beyond that packets drop and TCP backs off, as on a congested real link.
                _run("tc", "-n", self.ns[r], "qdisc", "add", "dev", self.veth[r], "root", "tbf",
                     "rate", f"{self.rate_mbit:g}mbit", "burst", f"{burst_kb}kb", "latency", f"{latency_ms}ms")

    def close(self) -> None:
        """Delete both namespaces; deleting a namespace deletes the veth end inside it, and a veth
        pair dies with either end. Idempotent: a missing namespace is not an error."""
        for ns in self.ns:
            _run("ip", "netns", "del", ns, check=False)


@dataclass
class Star:
    """N "nodes" on one switch: a namespace per rank, each with a veth to a bridge in a hub namespace. Only the
    slow rank's cable is shaped (tbf on both of its ends: a rank's egress, and the switch port's egress toward
    it), so every transfer that touches that rank crosses a slow link and no other does: one bad NIC or cable
    in a rack, where Link (two nodes) cannot say which end is slow."""
    tag: str
    world: int
    slow_rank: int | None = None
    rate_mbit: float | None = None
    ns: tuple[str, ...] = field(init=False)
    veth: tuple[str, ...] = field(init=False)
    addr: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        if not 2 <= self.world <= 9:
            raise ValueError("a star of 2-9 ranks (one digit in each interface's name)")
        self.hub = f"{self.tag}-h"
        self.ns = tuple(f"{self.tag}-n{r}" for r in range(self.world))
        self.veth = tuple(f"{self.tag}v{r}" for r in range(self.world))   # the rank's end, in its namespace
        self.port = tuple(f"{self.tag}p{r}" for r in range(self.world))   # the switch's end, in the hub
        a, b = random.randrange(64, 250), random.randrange(0, 250)
        self.addr = tuple(f"10.{a}.{b}.{r + 1}" for r in range(self.world))

    def command(self, rank: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[rank], *argv]

    def env(self, rank: int, master_port: int) -> dict[str, str]:
        return {"MASTER_ADDR": self.addr[0], "MASTER_PORT": str(master_port), "RANK": str(rank),
                "WORLD_SIZE": str(self.world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "GLOO_SOCKET_IFNAME": self.veth[rank]}

    def create(self, burst_kb: int = 64, latency_ms: int = 50) -> None:
        _run("ip", "netns", "add", self.hub)
        _run("ip", "-n", self.hub, "link", "add", f"{self.tag}br", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", f"{self.tag}br", "up")
        for r in range(self.world):
            _run("ip", "netns", "add", self.ns[r])
            _run("ip", "-n", self.ns[r], "link", "set", "lo", "up")
            _run("ip", "-n", self.ns[r], "link", "add", self.veth[r], "type", "veth", "peer", "name", self.port[r])
            _run("ip", "-n", self.ns[r], "link", "set", self.port[r], "netns", self.hub)
            _run("ip", "-n", self.hub, "link", "set", self.port[r], "master", f"{self.tag}br")
            _run("ip", "-n", self.hub, "link", "set", self.port[r], "up")
            _run("ip", "-n", self.ns[r], "addr", "add", f"{self.addr[r]}/24", "dev", self.veth[r])
            _run("ip", "-n", self.ns[r], "link", "set", self.veth[r], "up")
            if self.rate_mbit and r == self.slow_rank:  # as Link.create: tbf shapes egress, so both ends
                for ns, dev in ((self.ns[r], self.veth[r]), (self.hub, self.port[r])):
                    _run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{self.rate_mbit:g}mbit",
                         "burst", f"{burst_kb}kb", "latency", f"{latency_ms}ms")

    def close(self) -> None:
        for ns in (*self.ns, self.hub):
            _run("ip", "netns", "del", ns, check=False)


@contextmanager
def netns_star(world: int, slow_rank: int | None = None, rate_mbit: float | None = None):
    """Yield a fresh Star; delete its namespaces however the body ends (cleanup_stale clears a SIGKILLed one's)."""
    star = Star(_tag(), world, slow_rank, rate_mbit)
    try:
        star.create()
        yield star
    finally:
        star.close()


def netns_available() -> tuple[bool, str]:
    """(True, "") if this machine can make a shaped namespace link, else (False, what to do)."""
    if not sys.platform.startswith("linux"):
        return False, "network namespaces are Linux-only; use the emulated link (--emulate-rate-gbps)"
    if os.geteuid() != 0:
        return False, ("creating network namespaces needs root (CAP_NET_ADMIN); run as root, as CI does, "
                       "or use the emulated link: bandwidth.py --emulate-rate-gbps 0.025")
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        return False, f"{' and '.join(missing)} not found: install iproute2 (apt-get install -y iproute2)"
    probe = Link(_tag(), rate_mbit=1)
    try:  # the whole recipe once: namespace, veth pair, tbf, exec (a kernel or container may lack any)
        probe.create()
        _run(*probe.command(0, ["true"]))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return False, f"cannot build a namespace link here ({e}); in a container, run it --privileged"
    finally:
        probe.close()
    return True, ""


@contextmanager
def netns_link(rate_mbit: float | None = None, burst_kb: int = 64, latency_ms: int = 50):
    """Yield a fresh Link (tbf-shaped to `rate_mbit` when given); delete it however the body ends,
    KeyboardInterrupt included. A SIGKILL skips this: cleanup_stale() clears such leftovers."""
    link = Link(_tag(), rate_mbit=rate_mbit)
    try:
        link.create(burst_kb, latency_ms)  # inside the try: a half-built link is torn down too
        yield link
    finally:
        link.close()


def cleanup_stale(prefix: str = PREFIX, only_dead: bool = True) -> list[str]:
    """Delete namespaces named `prefix...` whose creating process has exited (all, if not only_dead).
    Returns the names deleted. Live owners are spared: other people's runs may share the machine."""
    removed = []
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if not name.startswith(prefix):
            continue
        if only_dead:
            try:
                pid = int(name[len(PREFIX):len(PREFIX) + _PID_W], 36)  # _tag put it after PREFIX
                os.kill(pid, 0)
                continue  # owner alive
            except ProcessLookupError:
                pass      # owner gone: stale
            except (ValueError, PermissionError):
                continue  # not our naming scheme, or alive under another user
        if _run("ip", "netns", "del", name, check=False).returncode == 0:
            removed.append(name)
    return removed


def run_two_nodes(link: Link | Star, argv: list[str], timeout_s: float, env_extra: dict | None = None,
                  cwd: str | None = None, peer_grace_s: float = 5.0) -> list[subprocess.CompletedProcess]:
    """Start every rank of `argv` in its namespace (env:// rendezvous: rank 0 and rank 1 of a Link, the
    `world` ranks of a Star) and wait.
    Returns each rank's CompletedProcess, with `.killed` saying why we killed it ("" if we did not).

    The port needs no OS choice: namespace 0 was made moments ago and holds only our processes,
    so any high port is free there. If one rank fails, the other would wait for it until its
    collective timeout; we kill it after `peer_grace_s` instead. Every exit path kills both
    process groups, so no rank outlives the call.
    """
    port = random.randrange(20000, 60000)
    procs, outs, killed = [], [], [""] * link.world
    try:
        for rank in range(link.world):
            outs.append((tempfile.TemporaryFile(), tempfile.TemporaryFile()))  # no pipe can fill and block
            procs.append(subprocess.Popen(link.command(rank, argv), cwd=cwd, stdout=outs[-1][0],
                                          stderr=outs[-1][1], start_new_session=True,
                                          env={**os.environ, **link.env(rank, port), **(env_extra or {})}))
        deadline, failed_at = time.monotonic() + timeout_s, None
        while None in [p.poll() for p in procs]:  # a list, not any(): every rank must be polled
            now = time.monotonic()
            bad = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            failed_at = failed_at or (now if bad else None)
            if now > deadline or (failed_at and now - failed_at > peer_grace_s):
                for r, p in enumerate(procs):
                    if p.poll() is None:
                        killed[r] = f"timeout after {timeout_s:g}s" if now > deadline else f"peer rank {bad[0]} failed"
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # the whole group: whatever the rank itself started
            p.wait()
    results = []
    for rank, (p, (o, e)) in enumerate(zip(procs, outs)):
        o.seek(0), e.seek(0)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, o.read().decode(errors="replace"),
                                                   e.read().decode(errors="replace")))
        results[-1].killed = killed[rank]  # "", "timeout after Ns" or "peer rank R failed"
        o.close(), e.close()
    return results


# ---- the fallback: a slow link emulated inside the process, no root needed -----------------

def _wire_seconds(nbytes: int, world: int, rate_gbps: float) -> float:
    """A ring all-reduce sends 2(n-1)/n of the buffer out of every rank (reduce-scatter then
    all-gather, (n-1)/n each), so a link of R bytes/s needs 2(n-1)/n * nbytes / R seconds.
    For n = 2 that is nbytes / R, and busbw (see bandwidth.py) then reads exactly R."""
    return 2 * (world - 1) / world * nbytes / (rate_gbps * 1e9)


def slow_all_reduce(t: torch.Tensor, rate_gbps: float, latency_s: float,
                    op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
    """dist.all_reduce(t), taking at least latency_s + wire time at `rate_gbps` GB/s (10^9 bytes/s,
    the unit busbw is printed in; 200 Mbit/s = 0.025). Only the shortfall is slept: the emulated
    link replaces the real one instead of adding to it. (On a GPU the call returns once queued, so
    the whole amount is slept; the GPU's own link is fast enough for that not to show.)"""
    t0 = time.perf_counter()
    dist.all_reduce(t, op=op, group=group)
    want = latency_s + _wire_seconds(t.numel() * t.element_size(), dist.get_world_size(group), rate_gbps)
    time.sleep(max(0.0, want - (time.perf_counter() - t0)))
    return t


def delay_comm_hook(rate_gbps: float, latency_s: float):
    """A DDP comm hook: average the bucket like the default hook, completing no earlier than a
    link of `rate_gbps` GB/s and `latency_s` would allow.  ddp.register_comm_hook(None, hook)

    Where the delay goes matters. DDP waits for every bucket's future before backward() returns,
    so a sleep in the hook and a sleep in a .then callback both slow backward. Measured (gloo, 2
    ranks, 4 buckets, 50 ms each): sleep in the hook 207 ms per backward, as it blocks the
    autograd thread, 4 x 50 ms in series; sleep in .then 110 ms, as callbacks run on gloo's 2
    worker threads and each sleep stalls the collectives queued behind it, 2 x 50 ms. Neither is
    a link. So nothing sleeps: a timer completes the returned future (58 ms above: the latencies
    overlap, as packets in flight do), and the link sends one bucket at a time (`free_at`).
    """
    lock, free_at = threading.Lock(), 0.0

    def hook(state, bucket):
        group = state if state is not None else dist.group.WORLD
        nonlocal free_at
        buf, world = bucket.buffer(), dist.get_world_size(group)
        with lock:  # the link is busy until free_at; this bucket's bytes go after the previous ones
            nbytes = buf.numel() * buf.element_size()
            free_at = max(time.monotonic(), free_at) + _wire_seconds(nbytes, world, rate_gbps)
            done_at = free_at + latency_s
        buf.div_(world)  # average, as the default hook does (dividing first avoids fp16 overflow)
        out = torch.futures.Future(devices=None if buf.device.type == "cpu" else [buf.device])

        def arrived(fut):
            try:
                value = fut.value()[0]
            except Exception as e:  # a failed all-reduce must fail backward, not hang it
                out.set_exception(e)
                return
            # Not a daemon: set_result releases the GIL while it wakes DDP, and takes it back on the
            # way out. A daemon timer still in there when the rank exits is stopped by the exiting
            # interpreter inside that C++ frame: std::terminate, "terminate called without an active
            # exception", SIGABRT. Python joins non-daemon threads before it exits; each ends <= done_at.
            # Said explicitly: this callback runs on gloo's thread, and a thread started from a thread
            # Python did not start is a daemon by default.
            timer = threading.Timer(max(0.0, done_at - time.monotonic()), out.set_result, (value,))
            timer.daemon = False
            timer.start()

        dist.all_reduce(buf, group=group, async_op=True).get_future().add_done_callback(arrived)
        return out

    return hook


def main() -> int:
    ap = argparse.ArgumentParser(description="Run a command as 2 ranks on 2 namespaced nodes.")
    ap.add_argument("--rate-mbit", type=float, default=None, help="tbf rate; unshaped if omitted")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- command ...")
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    ok, why = netns_available()
    if not ok or not argv:
        print(why or "give a command after --", file=sys.stderr)
        return 2
    cleanup_stale()
    with netns_link(args.rate_mbit) as link:
        results = run_two_nodes(link, argv, args.timeout, cwd=os.getcwd())
    for rank, r in enumerate(results):  # c10d's "hostname ... cannot be retrieved" is harmless: no DNS here
        print(f"[rank={rank}] exit {r.returncode} {r.killed}".rstrip(), *filter(None, (r.stdout, r.stderr)),
              sep="\n", end="", flush=True)
    return max(abs(r.returncode) for r in results)


if __name__ == "__main__":
    sys.exit(main())
