"""Where a process runs: device, backend, rank. The only file in the course that names a device.

    python  script.py                          -> one process, rank 0 of 1, no process group
    torchrun --nproc_per_node 2 script.py      -> RANK/WORLD_SIZE/LOCAL_RANK come from torchrun

Device choice (`auto`): CUDA + NCCL when a GPU is visible, else CPU + gloo. Everything else in
the course asks this module (`synchronize`, `peak_bytes`, ...) instead of testing for a GPU itself.
"""
from __future__ import annotations

import datetime as _dt
import os
import resource
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

DEVICE_CHOICES = ("auto", "cpu", "cuda")
_BACKEND = {"cpu": "gloo", "cuda": "nccl"}  # the one place a backend is named


def pick_device(prefer: str = "auto", local_rank: int = 0) -> tuple[torch.device, str]:
    """(device, backend) for this process. `prefer` is one of DEVICE_CHOICES."""
    if prefer not in DEVICE_CHOICES:
        raise ValueError(f"device must be one of {DEVICE_CHOICES}, got {prefer!r}")
    has_gpu = torch.cuda.is_available()
    if prefer == "cuda" and not has_gpu:
        raise RuntimeError("--device cuda asked for, but torch sees no GPU (torch.cuda.is_available() "
                           "is False). Check `nvidia-smi` and that torch is a CUDA build.")
    kind = "cuda" if (prefer == "cuda" or (prefer == "auto" and has_gpu)) else "cpu"
    if kind == "cuda":
        device = torch.device(kind, local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device(kind)
    return device, _BACKEND[kind]


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        """Rank 0 does all printing and saving of shared files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or dist.is_initialized()


def init(prefer: str = "auto", timeout_s: float = 60.0, cpu_threads: int | None = 1) -> DistEnv:
    """Read torchrun's environment, choose device+backend, start the process group.

    Not launched by torchrun (no RANK in the environment): a single process, no group.
    `timeout_s` bounds every collective: a rank waiting for a peer that never comes raises
    after that long instead of hanging forever (gloo honours it; NCCL needs
    TORCH_NCCL_ASYNC_ERROR_HANDLING, on by default in recent torch).
    On CPU each rank gets `cpu_threads` intra-op threads, so N ranks on N cores do not fight.
    """
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    # An explicit choice wins; "auto" defers to COURSE_DEVICE (how the checker passes --device to its runs).
    choice = prefer if prefer != "auto" else os.environ.get("COURSE_DEVICE", "auto")
    device, backend = pick_device(choice, local_rank)
    if device.type == "cpu" and cpu_threads:
        torch.set_num_threads(cpu_threads)
    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=_dt.timedelta(seconds=timeout_s),
                                device_id=device if device.type != "cpu" else None)
    return DistEnv(rank, world, local_rank, device, backend)


def teardown() -> None:
    """Leave together: a rank that destroys its group while a peer is still talking to it can abort
    the peer (gloo: "terminate called without an active exception"), so meet at a barrier first."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def log(env: DistEnv, *msg, all_ranks: bool = False) -> None:
    """Rank 0 prints; with all_ranks every rank prints with a [rank=N] prefix."""
    if all_ranks:
        print(f"[rank={env.rank}]", *msg, flush=True)
    elif env.is_main:
        print(*msg, flush=True)


def synchronize(device: torch.device) -> None:
    """Wait for queued device work; a timer that skips this measures kernel launches, not kernels."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> dict:
    """Peak memory: the CUDA caching allocator's peak on a GPU; the process's peak RSS always.

    RSS covers everything the process ever touched (torch's libraries alone are ~300 MB), so on
    CPU the meaningful per-rank figure is the model-state bytes counted from the tensors.
    """
    out = {"peak_rss_bytes": peak_rss_bytes()}
    if device.type == "cuda":
        out["device_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        out["device_peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    return out


def peak_rss_bytes() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru if sys.platform == "darwin" else ru * 1024  # Linux reports KiB, macOS bytes


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def device_rng_state():
    """The GPU's RNG streams (dropout on the device draws from these), or None on CPU."""
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def set_device_rng_state(state) -> None:
    if state is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state)


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """What torch DDP's `device_ids` wants: [the GPU index] on CUDA, None on CPU."""
    return [device.index] if device.type == "cuda" else None
