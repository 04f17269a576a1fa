"""`checker doctor`: is this node ready for the course? Run it first on a new machine.

    checker doctor                      # one row per check: ok | warn | fail, measured value, what to do
    checker doctor --json doctor.json   # the same rows as JSON: {"passed", "seconds", "rows": [...]}
    checker doctor --device cpu         # diagnose the CPU+gloo path on a GPU node

Exit status 0 when no row failed (warnings allowed), 1 when one did. Each check is a function of
its inputs (an environment mapping, the interface names, a port-binding function, ...) with the
real machine as the default, so tests can hand it a broken world instead of breaking this one.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping

import torch
import torch.distributed as dist
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from checker import course_data, sandbox, slurm, versions
from checker.doctor_smoke import smoke_test
from checker.harness import REPO_ROOT
from labs.common import compat
from labs.common.dist import DEVICE_CHOICES, pick_device

GiB = 2**30
SHM_MIN = 1 * GiB  # docker's default /dev/shm is 64 MiB: DataLoader workers and NCCL run out of it
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "COURSE_")
ENV_NAMES = ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE",
             "LOCAL_RANK")
DATA_VOCABS = course_data.VOCABS  # what `make data` writes (Makefile, target `data`)
VERDICTS = ("ok", "warn", "fail")


@dataclass
class Row:
    name: str
    verdict: str  # ok | warn | fail
    value: str | int | float | None
    message: str  # what happened, and for warn/fail what to try next
    unit: str = ""


def check_versions(python: tuple = tuple(sys.version_info[:3]), torch_version: str = torch.__version__,
                   supported: str | None = None, added: list[str] | None = None) -> list[Row]:
    """Python, and torch against the supported range `supported` (pyproject.toml's; labs/common/compat.py holds what
    differs inside it, and `added` is what it gave this torch)."""
    if supported is None:
        supported = versions.torch_requirement(REPO_ROOT)
    if added is None:
        added = list(compat.ADDED)  # what labs.common.dist's import (above) had compat fill in
    new = python >= (3, 10)
    rows = [Row("python", "ok" if new else "fail", ".".join(map(str, python)), "the course needs 3.10+" if new else
                "the course needs Python 3.10+: make the venv with a newer one (`PYTHON=python3.11 make setup`)")]
    inside, message = compat.describe(torch_version, added, supported) if supported else (True, "no requirement")
    rows.append(Row("torch", "ok" if inside else "warn", torch_version, message))
    return rows


def _gpu_info() -> dict:
    info = {"available": torch.cuda.is_available(), "build": torch.version.cuda,
            "driver": os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None}
    if info["available"]:
        info["names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        v = torch.cuda.nccl.version() if dist.is_nccl_available() else None  # a tuple; an int before torch 2.0
        info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else v
    return info


def check_gpu(info: dict | None = None) -> Row:
    g = info if info is not None else _gpu_info()
    if g["available"]:
        names = ", ".join(f"{i}: {n}" for i, n in enumerate(g["names"]))
        return Row("gpu", "ok", len(g["names"]), f"{names}; CUDA {g['build']}, NCCL {g.get('nccl') or 'not built in'}",
                   "devices")
    if g["driver"] and not g["build"]:
        return Row("gpu", "warn", 0, "this machine has an NVIDIA driver but torch is a CPU build, so the course runs "
                   "on CPU+gloo: install a CUDA build of the pinned torch (README, 'CPU and GPU')", "devices")
    if g["driver"]:
        return Row("gpu", "warn", 0, f"torch is a CUDA {g['build']} build but sees no GPU: check `nvidia-smi`, "
                   "CUDA_VISIBLE_DEVICES, and that the driver supports that CUDA version", "devices")
    return Row("gpu", "ok", 0, "no GPU: the course runs on CPU+gloo", "devices")


def _backends() -> dict[str, bool]:
    if not dist.is_available():
        return {}
    return {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available()}


def check_backends(available: Mapping[str, bool] | None = None) -> Row:
    available = _backends() if available is None else available
    have = [b for b, ok in available.items() if ok]
    if not have:
        return Row("backends", "fail", "none", "torch.distributed has no backend (gloo, nccl, mpi): this torch was "
                   "built without distributed support; reinstall torch from PyPI (`make setup`)")
    return Row("backends", "ok", ", ".join(have),
               f"not built in: {', '.join(sorted(set(available) - set(have))) or '-'}")


def check_pick(prefer: str, available: Mapping[str, bool] | None = None, pick: Callable = pick_device) -> Row:
    available = _backends() if available is None else available
    try:
        device, backend = pick(prefer)
    except (ValueError, RuntimeError) as e:
        return Row("course_pick", "fail", prefer, f"labs.common.dist.pick_device({prefer!r}) refused: {e}")
    if not available.get(backend):
        return Row("course_pick", "fail", f"{device.type}+{backend}", f"the course would use {backend} on "
                   f"{device.type}, but this torch lacks {backend}: reinstall torch, or try `--device cpu`")
    return Row("course_pick", "ok", f"{device.type}+{backend}",
               f"what labs.common.dist.pick_device({prefer!r}) chooses")


def bind_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))  # port 0: the OS picks one nobody holds (as torchrun --standalone does)
        return s.getsockname()[1]


def check_port(bind: Callable[[], int] = bind_free_port) -> Row:
    try:
        return Row("free_port", "ok", bind(), "the OS hands out free ports on localhost (ranks rendezvous on one)")
    except OSError as e:
        return Row("free_port", "fail", None, f"the OS gave no free TCP port on 127.0.0.1 ({e}); ranks cannot "
                   "rendezvous. Check the loopback is up (`ip link show lo`) and that ephemeral ports are not "
                   "exhausted (`ss -s`; sysctl net.ipv4.ip_local_port_range)")


def check_shm(path: str = "/dev/shm", usage: Callable = shutil.disk_usage) -> Row:
    try:
        u = usage(path)
    except OSError:
        return Row("shm", "warn", None, f"no {path}: DataLoader workers and NCCL share memory through it; in a "
                   "container start it with --ipc=host or --shm-size=8g (macOS has none; fine on CPU)")
    value = f"{u.free / GiB:.1f} of {u.total / GiB:.1f}"
    if u.total < SHM_MIN or u.free < SHM_MIN:
        return Row("shm", "warn", value, f"{path} has under 1 GiB free: DataLoader workers die with 'Bus error' and "
                   "NCCL with 'unhandled system error' when it fills. Docker: --shm-size=8g or --ipc=host", "GiB free")
    return Row("shm", "ok", value, "enough for DataLoader workers and NCCL's shared-memory transport", "GiB free")


def _mem_available() -> int | None:
    """MemAvailable (what can be allocated without swapping), in bytes; None off Linux."""
    m = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M) \
        if Path("/proc/meminfo").exists() else None
    return int(m.group(1)) * 1024 if m else None


def check_machine(cpus: int | None = None, mem_available: int | None = None) -> list[Row]:
    cpus = cpus if cpus is not None else (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                          else os.cpu_count() or 1)
    mem = mem_available if mem_available is not None else _mem_available()
    rows = [Row("cpus", "ok" if cpus >= 2 else "warn", cpus, "2-rank labs run one rank per core" if cpus >= 2 else
                "one core: 2 ranks take turns on it, so grades run slowly; stretch the budgets with "
                "CHECKER_BUDGET_SCALE=2", "usable cores")]
    if mem is None:
        rows.append(Row("memory", "warn", None, "could not read /proc/meminfo; each rank needs ~0.5 GiB"))
    else:
        rows.append(Row("memory", "ok" if mem >= 2 * GiB else "warn", round(mem / GiB, 1),
                        "each rank needs ~0.5 GiB (torch itself ~0.3)" if mem >= 2 * GiB else
                        "under 2 GiB available: 2-3 ranks of torch may be killed by the OOM killer; close other "
                        "programs", "GiB available"))
    return rows


def _interfaces() -> list[str]:
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return sorted(name for _, name in socket.if_nameindex())


def _missing_ifnames(var: str, value: str, interfaces: list[str]) -> list[str]:
    """Names in GLOO_SOCKET_IFNAME (exact, comma-separated) or NCCL_SOCKET_IFNAME (prefixes; '=' exact;
    '^' excludes, which cannot name a missing interface) that match no interface here."""
    if var.startswith("NCCL") and value.startswith("^"):
        return []
    exact = var.startswith("GLOO") or value.startswith("=")
    names = [n.strip() for n in value.lstrip("=").split(",") if n.strip()]
    return [n for n in names if not any(i == n or (not exact and i.startswith(n)) for i in interfaces)]


def check_env(env: Mapping[str, str] | None = None, interfaces: list[str] | None = None) -> list[Row]:
    env = os.environ if env is None else env
    interfaces = _interfaces() if interfaces is None else interfaces
    seen = sorted(k for k in env if k.startswith(ENV_PREFIXES) or k in ENV_NAMES)
    rows = [Row("env", "ok", len(seen), "; ".join(f"{k}={env[k]}" for k in seen) if seen else
                "none of NCCL_*, GLOO_*, TORCH_*, COURSE_*, MASTER_*, RANK, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES "
                "set: defaults apply", "set")]
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        missing = _missing_ifnames(var, env.get(var, ""), interfaces)
        if missing:
            rows.append(Row(var, "fail", env[var], f"names no interface on this machine: {', '.join(missing)} (here: "
                            f"{', '.join(interfaces) or 'none'}). The backend cannot open its sockets and the first "
                            f"collective fails or hangs: unset {var}, or set it to the interface that carries this "
                            "node's address (`ip -br addr`)"))
    if "MASTER_PORT" in env:
        rows.append(Row("MASTER_PORT", "warn", env["MASTER_PORT"], "set for every job started from this shell: two "
                        "jobs on one node would both bind it ('address already in use'). Unset it; torchrun "
                        "--standalone and the checker take a free port from the OS"))
    stray = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if k in env]
    if stray:
        rows.append(Row("launcher_vars", "warn", ", ".join(stray), "set in this shell: the course reads RANK as "
                        "'started by torchrun', so a plain `python script.py` would wait for peers that never come. "
                        "Unset them; torchrun sets them for each rank"))
    if env.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        rows.append(Row("CUDA_VISIBLE_DEVICES", "warn", repr(env["CUDA_VISIBLE_DEVICES"]), "hides every GPU: the "
                        "course falls back to CPU+gloo. Unset it to use the GPUs"))
    slow = [k for k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE") if env.get(k) == "1"]
    if slow:
        rows.append(Row("nccl_disabled", "warn", ", ".join(slow), "forces NCCL onto slower transports: useful to "
                        "debug a hang, wrong for bandwidth figures. Unset for speed"))
    if env.get("COURSE_DEVICE", "auto") not in DEVICE_CHOICES:
        rows.append(Row("COURSE_DEVICE", "fail", env["COURSE_DEVICE"], f"must be one of {', '.join(DEVICE_CHOICES)}; "
                        "every lab script would refuse to start. Fix or unset it"))
    return rows


def check_data(dirs: list[Path] | None = None) -> Row:
    if dirs is None:
        from labs.common.data import corpus_dir
        dirs = [corpus_dir(v) for v in DATA_VOCABS]
    missing = [d for d in dirs if not (d / "meta.json").exists()]
    if missing:
        return Row("data", "warn", f"{len(dirs) - len(missing)}/{len(dirs)}",
                   f"missing {', '.join(map(str, missing))}: "
                   "run `make data` (else the first grade writes it, and spends its time budget doing so)", "corpora")
    return Row("data", "ok", f"{len(dirs)}/{len(dirs)}", f"in {dirs[0].parent}", "corpora")


def check_sandbox(why_not: Callable[[], str | None] = sandbox.why_not) -> Row:
    """Can a grade's runs be sandboxed (bubblewrap)? A learner's own grade goes on without; batch grading does not."""
    why = why_not()
    if why is None:
        return Row("sandbox", "ok", "bubblewrap", "each grade's runs in a bwrap (read-only course, loopback only); "
                   "`checker grade LAB --submissions DIR` grades a class here")
    return Row("sandbox", "warn", "none", f"{why}. A learner's own grade runs unsandboxed and says so; batch grading "
               f"(`--submissions`) refuses to start without it: `{sandbox.INSTALL}` (user namespaces must be allowed; "
               "in a container, run it with --privileged or grade elsewhere), or pass --no-sandbox")


def _squeue() -> str | None:
    """None when squeue answers, else why not (sinfo answering is not enough: squeue is what a batch polls)."""
    try:
        r = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"squeue did not answer ({type(e).__name__})"
    return None if r.returncode == 0 else f"squeue failed: {(r.stderr or r.stdout).strip()[:200]}"


def _nodes() -> str:
    r = subprocess.run(["sinfo", "-h", "-o", "%P %D %c %t"], capture_output=True, text=True, timeout=20)
    return "; ".join(" ".join(line.split()) for line in r.stdout.splitlines()) if r.returncode == 0 else ""


def check_slurm(unavailable: Callable[[], str | None] = slurm.unavailable, squeue: Callable[[], str | None] = _squeue,
                nodes: Callable[[], str] = _nodes) -> Row:
    """Does a Slurm answer (sbatch's controller via sinfo, and squeue)? Lab 5's scheduler checks need one."""
    why = unavailable() or squeue()
    if why is None:
        return Row("slurm", "ok", "answering", f"sinfo and squeue answer (partition nodes cpus state: {nodes()}): "
                   "lab 5's scheduler checks run here")
    return Row("slurm", "warn", "none", f"{why}: lab 5's scheduler checks will be NOT RUN here (not failures, no "
               f"grade). {slurm.HINT_START}")


def check_smoke(prefer: str = "auto", timeout_s: float = 60.0, gpus: int | None = None, pick: Callable = pick_device,
                smoke: Callable[..., dict] = smoke_test, **smoke_kw) -> list[Row]:
    world, rows = 2, []
    try:
        device, _ = pick(prefer)
    except (ValueError, RuntimeError) as e:  # the ranks would only fail the same way
        return [Row("allreduce", "fail", None, f"not run: the course cannot pick a device ({e}); see course_pick")]
    gpus = torch.cuda.device_count() if gpus is None else gpus
    if device.type != "cpu" and gpus < world:
        # pick_device gives rank r device r % count: with one GPU both ranks would share it, which NCCL
        # refuses ("Duplicate GPU detected"). Say so, and still measure the path that does work here.
        rows.append(Row("gpu_ranks", "warn", gpus, f"{world}-rank labs need {world} GPUs to run on {device.type} here; "
                        "grade them with `--device cpu`. The smoke test below runs on cpu"))
        prefer = "cpu"
    t0 = time.monotonic()
    r = smoke(prefer=prefer, world=world, timeout_s=timeout_s, **smoke_kw)
    if not r["ok"]:
        return rows + [Row("allreduce", "fail", None, f"{world}-rank all-reduce failed after "
                           f"{time.monotonic() - t0:.1f} s: {r['error'].rstrip('.')}. Look at the env/interface rows "
                           "above; rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL (and NCCL_DEBUG=INFO on GPUs) for "
                           "detail, or try `--device cpu`")]
    wrong = [x for x in r["rows"] if x["max_abs_err"] != 0]
    if wrong:
        return rows + [Row("allreduce", "fail", wrong[0]["max_abs_err"], f"all-reduce of {wrong[0]['bytes']:,} bytes "
                           f"on {r['backend']} gave a wrong sum (max abs error shown): a broken transport or a "
                           "mismatched build; try `--device cpu` and report it", "max abs err")]
    big, small = r["rows"][-1], r["rows"][0]
    return rows + [
        Row("allreduce", "ok", round(big["busbw"] / 1e9, 3),
            f"{world} ranks on {r['device']}+{r['backend']}: {big['bytes'] >> 20} MiB in "
            f"{big['seconds'] * 1e3:.2f} ms, sums exact at {len(r['rows'])} sizes "
            f"({small['bytes'] >> 10} KiB..{big['bytes'] >> 20} MiB)", "GB/s busbw"),
        Row("allreduce_latency", "ok", round(small["seconds"] * 1e6, 1),
            f"one {small['bytes'] >> 10} KiB all-reduce: the fixed cost every bucket pays", "µs")]


def run_checks(prefer: str = "auto", timeout_s: float = 60.0) -> list[Row]:
    checks: list[tuple[str, Callable[[], Row | list[Row]]]] = [
        ("versions", check_versions), ("gpu", check_gpu), ("backends", check_backends),
        ("course_pick", lambda: check_pick(prefer)), ("free_port", check_port), ("shm", check_shm),
        ("machine", check_machine), ("env", check_env), ("data", check_data), ("sandbox", check_sandbox),
        ("slurm", check_slurm),
        ("allreduce", lambda: check_smoke(prefer, timeout_s))]
    rows = []
    for name, fn in checks:
        try:  # independent checks: one that breaks is a failed row, not a crashed doctor
            out = fn()
        except Exception as e:  # noqa: BLE001 - any error here is a finding to show
            out = Row(name, "fail", None, f"the check itself raised {type(e).__name__}: {e}")
        rows.extend(out if isinstance(out, list) else [out])
    return rows


def render(rows: list[Row], console: Console, seconds: float) -> None:
    table = Table(title=f"checker doctor — {platform.node()}, {seconds:.1f} s", show_lines=True, title_justify="left")
    for col in ("check", "verdict", "measured", "what happened / what to do"):
        table.add_column(col, overflow="fold")
    colour = {"ok": "green", "warn": "yellow", "fail": "red"}
    for r in rows:  # values quote the environment (paths, variables): never read them as markup
        value = "-" if r.value is None else f"{r.value} {r.unit}".strip()
        table.add_row(escape(r.name), f"[{colour[r.verdict]}]{r.verdict.upper()}[/]", escape(value), escape(r.message))
    console.print(table)
    n = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    warned = [r.name for r in rows if r.verdict == "warn"]
    end = ("fix the failed rows first" if n["fail"] else
           f"ready for the labs, except what the warned rows say ({', '.join(warned)})" if warned else
           "ready for the labs")
    console.print(f"[{'red' if n['fail'] else 'green'}]doctor: {n['ok']} ok, {n['warn']} warn, {n['fail']} fail "
                  f"— {end}[/]")


def write_json(rows: list[Row], path: str, seconds: float) -> None:
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"passed": not any(r.verdict == "fail" for r in rows), "seconds": round(seconds, 2),
                               "rows": [asdict(r) for r in rows]}, indent=2))
    os.replace(tmp, p)


def main(args, console: Console, run: Callable[[str, float], list[Row]] = run_checks) -> int:
    """`checker doctor`, as cli.py calls it: prints the table, writes --json, returns the exit status."""
    # "auto" defers to COURSE_DEVICE, as labs.common.dist.init does, so the doctor tests what the labs will run.
    prefer = args.device if args.device != "auto" else os.environ.get("COURSE_DEVICE", "auto")
    t0 = time.monotonic()
    with console.status("doctor: checking (the all-reduce takes a few seconds)") if sys.stdout.isatty() \
            else contextlib.nullcontext():
        rows = run(prefer, args.timeout)
    seconds = time.monotonic() - t0
    render(rows, console, seconds)
    if args.json:
        write_json(rows, args.json, seconds)
    return 1 if any(r.verdict == "fail" for r in rows) else 0
