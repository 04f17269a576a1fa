"""Which GPUs a graded run may use: disjoint GPUs per concurrent run, and per learner in batch grading.

Every rank sets LOCAL_RANK = its rank and takes GPU `LOCAL_RANK % device_count` (labs/common/dist.py).
Without help, the 2-3 runs a grade starts at once, and every learner of a batch, would all land on GPUs
0 and 1 of an 8-GPU node while 2-7 idle, and timings would measure the neighbours. So each run gets its
own GPUs through CUDA_VISIBLE_DEVICES: inside the run they are numbered 0..n-1 again and LOCAL_RANK
picks one each. A run that needs more GPUs than the pool holds is refused before it starts: NCCL would
fail later with "Duplicate GPU detected", which names no cause a learner can act on.

Two ranks may share a GPU only when they talk over gloo (COURSE_BACKEND=gloo, what `make gpu-check` does on
one GPU): then RANKS_PER_GPU (COURSE_RANKS_PER_GPU) ranks go on each GPU.

Standard library only: the checker's own process never initialises CUDA.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")  # one folder per NVIDIA GPU the driver sees


class Oversubscribed(Exception):
    """A run wants more GPUs than this checker may use; the message says what to do."""


def visible_gpus(environ=os.environ) -> list[str]:
    """The GPUs this process may hand out, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs).

    CUDA_VISIBLE_DEVICES set (a batch learner's share, Slurm's --gres): exactly those. Otherwise every GPU
    the driver lists; no NVIDIA driver: none, without importing torch (a CPU machine stays quick)."""
    env = environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    return [str(i) for i in range(gpu_count())]


def gpu_count() -> int:
    """GPUs the driver shows this machine (torch.cuda.device_count() asks NVML and does not start CUDA)."""
    if not NVIDIA_PROC.is_dir():
        return 0
    import torch

    return torch.cuda.device_count()


def ranks_per_gpu(environ=os.environ) -> int:
    """How many ranks of one run may share a GPU: 1 with NCCL; COURSE_RANKS_PER_GPU (default 2) with gloo."""
    if environ.get("COURSE_BACKEND") != "gloo":
        return 1
    return max(1, int(environ.get("COURSE_RANKS_PER_GPU", "2")))


def gpus_needed(nproc: int, per_gpu: int) -> int:
    return -(-nproc // per_gpu)


class GpuPool:
    """Hands out disjoint GPUs to runs that live at the same time; thread-safe (batch grading uses threads)."""

    def __init__(self, gpus: list[str], per_gpu: int = 1):
        self.gpus, self.per_gpu = list(gpus), per_gpu
        self.free = list(gpus)
        self._lock = threading.Lock()

    def check(self, nproc: int, what: str = "a run") -> int:
        """GPUs one run of nproc ranks needs; Oversubscribed if this pool can never hold it."""
        need = gpus_needed(nproc, self.per_gpu)
        if need > len(self.gpus):
            raise Oversubscribed(
                f"{what} needs {nproc} ranks = {need} GPU(s) at {self.per_gpu} rank(s) per GPU, but this checker may "
                f"use {len(self.gpus)} ({','.join(self.gpus) or 'none'}; CUDA_VISIBLE_DEVICES decides). NCCL cannot "
                "put two ranks of one group on one GPU. Give it more GPUs, or grade on one GPU with "
                "COURSE_BACKEND=gloo (ranks share it, as `make gpu-check` does), or use --device cpu.")
        return need

    def acquire(self, nproc: int) -> list[str] | None:
        """Disjoint GPUs for one run, or None while too few are free (the run waits for others to finish)."""
        need = self.check(nproc)
        with self._lock:
            if len(self.free) < need:
                return None
            got, self.free = self.free[:need], self.free[need:]
            return got

    def release(self, gpus: list[str] | None) -> None:
        with self._lock:
            self.free.extend(g for g in gpus or [] if g not in self.free)
            self.free.sort(key=self.gpus.index)

    def split(self, parts: int, each: int) -> list[list[str]]:
        """`parts` disjoint blocks of `each` GPUs (batch grading: one block per learner graded at once)."""
        if parts * each > len(self.gpus):
            raise Oversubscribed(
                f"{parts} learners at once x {each} GPU(s) each = {parts * each} GPUs, but {len(self.gpus)} are "
                f"visible ({','.join(self.gpus)}). Lower --parallel to {max(1, len(self.gpus) // each)}.")
        return [self.gpus[i * each:(i + 1) * each] for i in range(parts)]


def cuda_env(gpus: list[str]) -> dict[str, str]:
    """What a run's environment gets: its GPUs, and the deterministic settings of graded CUDA runs
    (labs/common/dist.py's deterministic(): CUBLAS_WORKSPACE_CONFIG must be set before cuBLAS starts)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpus), "COURSE_DETERMINISTIC": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def uses_gpu(device: str, environ=os.environ) -> bool:
    """Will this grade's runs be on GPUs? `auto` means yes exactly when one is visible."""
    return device == "cuda" or (device == "auto" and bool(visible_gpus(environ)))


def may_use_gpu(device: str) -> bool:
    """Could this grade's runs touch a GPU (device `auto` on a machine with GPU device files)? Where it could
    not, a run's address space may be limited (checker/limits.py): CUDA reserves far more than it uses."""
    return device not in ("cpu", "auto") or (device == "auto" and any(
        os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")))
