"""`checker doctor`'s smoke test: 2 ranks all-reduce on the backend the course would pick.

    python -m checker.doctor_smoke RANK WORLD PORT PREFER BACKEND CRASH PG_TIMEOUT TAG   (smoke_test starts it)

The parent (`smoke_test`) hosts the rendezvous store itself on a port the OS chose (port 0), so
there is no window in which another job can take the port between choosing and binding it. Each
rank is a plain subprocess in its own session; the parent polls them, stops every rank as soon
as one fails or the deadline passes, and reaps them all before returning. Rank 0 hands its
measurements back through the same store: no files, no parsing of output.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

from checker.forkserver import become_subreaper
from checker.harness import REPO_ROOT
from labs.instruments import proctree

HOST = "127.0.0.1"  # both ranks on this node: the loopback needs no interface choice
SIZES = [2**k for k in range(10, 25, 2)]  # 1 KiB .. 16 MiB, x4 apart: 8 sizes
RESULT_KEY = "doctor/result"


def _reps(nbytes: int) -> int:
    # Small messages are cheap and noisy (more repeats for a stable median); 16 MiB costs ~10 ms on CPU.
    return 20 if nbytes <= 2**16 else 5


def _measure(device: torch.device, sizes: list[int]) -> list[dict]:
    from labs.common.dist import synchronize

    world, rank = dist.get_world_size(), dist.get_rank()
    rows = []
    for nbytes in sizes:
        n = nbytes // 4  # float32
        # A pattern that differs per element and per rank catches a misplaced chunk as well as a wrong sum;
        # every value is a small integer, so float32 sums are exact and the check can demand equality.
        pattern = (torch.arange(n, device=device) % 251).float()
        t = pattern + rank
        dist.all_reduce(t)
        want = world * pattern + world * (world - 1) / 2
        err = (t - want).abs().max().item()
        times = []
        for i in range(_reps(nbytes) + 1):
            dist.barrier()  # start together: otherwise we time the slower rank's arrival, not the collective
            t0 = time.perf_counter()
            dist.all_reduce(t)
            synchronize(device)  # a GPU returns before the kernel ends; time the kernel, not its launch
            if i:  # the first is warm-up (connections, buffers)
                times.append(time.perf_counter() - t0)
        sec = statistics.median(times)
        algbw = nbytes / sec  # bytes of the tensor per second, as a user sees it
        # A ring all-reduce moves 2(n-1)/n of the tensor over each rank's link (reduce-scatter then
        # all-gather, each (n-1)/n); busbw = algbw * 2(n-1)/n is comparable across world sizes and to
        # the link's own speed (nccl-tests' convention). n = 2: busbw = algbw.
        busbw = algbw * 2 * (world - 1) / world
        rows.append({"bytes": nbytes, "seconds": sec, "busbw": busbw, "max_abs_err": err})
    return rows


def worker(rank: int, world: int, port: int, prefer: str, backend: str, crash: str, timeout_s: float) -> None:
    from labs.common.dist import pick_device

    torch.set_num_threads(1)  # the course's CPU setting: ranks do not fight over cores
    if crash == "exit" and rank == world - 1:
        sys.exit("doctor smoke test: rank crashed on purpose (test of the cleanup path)")
    if crash == "hang-all" or (crash == "hang" and rank == world - 1):
        time.sleep(10**6)
    device, picked = pick_device(prefer, local_rank=rank)
    timeout = _dt.timedelta(seconds=timeout_s)
    store = dist.TCPStore(HOST, port, is_master=False, timeout=timeout)
    dist.init_process_group(backend or picked, store=store, rank=rank, world_size=world, timeout=timeout,
                            device_id=device if device.type != "cpu" else None)
    rows = _measure(device, SIZES)
    if rank == 0:
        store.set(RESULT_KEY, json.dumps({"device": str(device), "backend": dist.get_backend(), "rows": rows}))
    dist.barrier()  # leave together: every collective before it was waited on (see labs.common.dist.teardown)
    dist.destroy_process_group()


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """SIGKILL every rank's session and anything it started, then reap: nothing outlives the doctor."""
    pids = {p.pid for p in procs}
    pids |= set(proctree.descendants(*pids, zombies=True))
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proctree.signal_each(pids, signal.SIGKILL)
    for p in procs:
        p.wait()


def _tail(log) -> str:
    """The line a learner needs from a rank's output: its last exception line, else its last line."""
    log.seek(0)
    lines = [ln.strip() for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b.*:", ln)]
    return (errors or lines or ["(no output)"])[-1][:400]


def smoke_test(prefer: str = "auto", world: int = 2, timeout_s: float = 60.0, backend: str = "",
               crash: str = "", tag: str = "") -> dict:
    """Run the all-reduce on `world` ranks. Returns {"ok": True, "device", "backend", "rows"} or
    {"ok": False, "error": one line}. For tests of the failure paths: `backend` overrides the course's
    pick; `crash` breaks the last rank ("exit", "hang") or every rank ("hang-all"); `tag` goes on each
    rank's command line so a test can look for leftovers."""
    become_subreaper()  # a rank's stray child is re-parented to us, so _kill_all can find it
    # Ranks turn a hang into an error at half the budget (the process-group timeout), which says more
    # than being killed at the deadline; the deadline is the guarantee.
    pg_timeout = max(2.0, timeout_s / 2)
    store = dist.TCPStore(HOST, 0, is_master=True, wait_for_workers=False,
                          timeout=_dt.timedelta(seconds=timeout_s))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # the ranks rendezvous through our store; a stray torchrun variable must not interfere
    procs, logs = [], []
    t0 = time.monotonic()
    try:
        for rank in range(world):
            log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty rank can never block on a full pipe
            cmd = [sys.executable, "-m", "checker.doctor_smoke", str(rank), str(world), str(store.port), prefer,
                   backend or "-", crash or "-", str(pg_timeout), tag or "-"]
            procs.append(subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
            logs.append(log)
        while True:
            codes = [p.poll() for p in procs]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:  # one rank failed: its peers would only wait for it, so stop them now
                r = bad[0]
                return {"ok": False, "error": f"rank {r} exited with status {codes[r]}: {_tail(logs[r])}"}
            if all(c == 0 for c in codes):
                break
            if time.monotonic() - t0 > timeout_s:
                waiting = [r for r, c in enumerate(codes) if c is None]
                return {"ok": False, "error": f"no result within {timeout_s:.0f} s (rank(s) {waiting} still running; "
                                              f"killed). Last output: {_tail(logs[waiting[0]])}"}
            time.sleep(0.05)
        if not store.check([RESULT_KEY]):  # never block on a key that will not come
            return {"ok": False, "error": "every rank exited 0 but rank 0 left no result"}
        return {"ok": True, **json.loads(store.get(RESULT_KEY))}
    finally:
        _kill_all(procs)
        for log in logs:
            log.close()


if __name__ == "__main__":
    r, w, p, pref, be, cr, to, _tag = sys.argv[1:9]
    worker(int(r), int(w), int(p), pref, "" if be == "-" else be, "" if cr == "-" else cr, float(to))
