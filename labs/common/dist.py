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
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import compat, staging

# The names of torch 2.13 the labs call, on every supported release (an older one spells them differently):
# installed once here, where every lab, solution and checker run that touches the training core passes.
compat.install(dist)

DEVICE_CHOICES = ("auto", "cpu", "cuda")
_BACKEND = {"cpu": "gloo", "cuda": "nccl"}  # the one place a backend is named
# COURSE_BACKEND=gloo keeps CUDA tensors but talks over gloo: the only way to run 2 ranks on ONE GPU (NCCL
# refuses two ranks of a group on the same device: "Duplicate GPU detected"). `make gpu-check` uses it.
BACKEND_OVERRIDES = ("gloo",)
# cuBLAS picks a reduction split per call from a workspace pool shared by streams; with a fixed pool of
# 8 buffers of 4096 KiB every call splits the same way, so a matmul gives the same bits run after run.
CUBLAS_WORKSPACE = ":4096:8"


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
        # The checker (and torchrun with CUDA_VISIBLE_DEVICES) shows each run only its own GPUs, so
        # local_rank indexes them; % only matters when ranks share GPUs on purpose (COURSE_BACKEND=gloo).
        device = torch.device(kind, local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        if os.environ.get("COURSE_DETERMINISTIC") == "1":
            deterministic(device)
    else:
        device = torch.device(kind)
    backend = os.environ.get("COURSE_BACKEND") or _BACKEND[kind]
    if backend != _BACKEND[kind] and backend not in BACKEND_OVERRIDES:
        raise ValueError(f"COURSE_BACKEND must be one of {BACKEND_OVERRIDES} (or unset), got {backend!r}")
    return device, backend


def deterministic(device: torch.device) -> dict:
    """Bit-identical results on a GPU, run after run (the checker's graded CUDA runs set COURSE_DETERMINISTIC=1):
      - torch.use_deterministic_algorithms: the deterministic kernel where one exists (scatter/index_add
        backward, e.g. the embedding's gradient, otherwise sums with atomics in whatever order threads finish).
        warn_only: an op with no deterministic CUDA kernel warns in the run's log instead of killing the run;
        the bit-identical checks themselves then say whether it mattered;
      - CUBLAS_WORKSPACE_CONFIG (see CUBLAS_WORKSPACE): read when cuBLAS starts, so it is set here before the
        first matmul and by the checker in every run's environment;
      - attention by the math kernel only: the flash/memory-efficient kernels' backward accumulate in a
        nondeterministic order, and the model's attention dropout must draw the same mask every run.
    Returns what was set (the checker reports it)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    for kernel in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        if hasattr(torch.backends.cuda, kernel):
            getattr(torch.backends.cuda, kernel)(False)
    torch.backends.cuda.enable_math_sdp(True)
    return {"deterministic_algorithms": True, "cublas_workspace": os.environ["CUBLAS_WORKSPACE_CONFIG"],
            "sdpa": "math", "device": str(device)}


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
    if staging.wanted(os.environ, device.type, backend):  # gloo on a GPU: the host-memory fallback (staging.py)
        staging.install(every_tensor=os.environ.get(staging.ENV) == "1")
    # DeepSpeed and torch's own wrappers call collectives this torch marks deprecated (all_gather_into_tensor, ...):
    # a FutureWarning per call site per rank, from code no lab can change. torch attributes every one to its own
    # c10d_logger, whoever called, so they all go; the course's code uses the new names.
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\S+` (is|will be) deprecated",
                            category=FutureWarning, module=r"(torch|deepspeed)(\.|$)")
    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=_dt.timedelta(seconds=timeout_s),
                                device_id=device if device.type != "cpu" else None)
    return DistEnv(rank, world, local_rank, device, backend)


def teardown(timeout_s: float = 120) -> None:
    """Leave together, then destroy the group: a rank that destroys its group while a peer is still
    talking to it can abort the peer.

    The ranks meet at the rendezvous store, not at `dist.barrier()`. A gloo barrier waits for every
    collective queued before it, and one of the group's worker threads drops those collectives (and
    their tensors) a moment after the barrier has returned. If the rank has meanwhile reached interpreter
    shutdown, that thread needs a GIL that is gone and the rank aborts ("terminate called without an
    active exception"): lab 3's compare.py did so in 5 of 30 runs beside two busy loops on 2 cores, and in
    none of 72 meeting at the store. Counting arrivals in the store queues no collective at all."""
    if not dist.is_initialized():
        return
    store, world, rank = dist.distributed_c10d._get_default_store(), dist.get_world_size(), dist.get_rank()
    # One counter per restart of the job; a store that outlives a group (torchrun's, shared by its restarts)
    # may already hold arrivals, so each rank waits for the end of its own round of `world` arrivals.
    key = f"course/teardown/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    deadline = time.monotonic() + timeout_s
    arrived = int(store.add(key, 1))
    everyone = -(-arrived // world) * world
    _wait_for(store, key, everyone, deadline)
    # Without torchrun the store lives in rank 0's process and goes with its group: rank 0 leaves last,
    # once every other rank has seen the count, so no rank is left polling a store that is gone.
    seen = f"{key}/seen/{everyone // world}"
    if rank == 0:
        _wait_for(store, seen, world - 1, deadline)
    else:
        store.add(seen, 1)
    dist.destroy_process_group()


def _wait_for(store, key: str, count: int, deadline: float) -> None:
    """Poll the store's counter `key` until it reaches `count` (adding 0 reads a counter)."""
    while (now := int(store.add(key, 0))) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"teardown: {key} counted {now} of {count}: a rank never arrived")
        time.sleep(0.005)


def log(env: DistEnv, *msg, all_ranks: bool = False) -> None:
    """Rank 0 prints; with all_ranks every rank prints with a [rank=N] prefix."""
    if all_ranks:  # one write per line: ranks sharing a terminal or a pipe don't interleave mid-line
        print(" ".join([f"[rank={env.rank}]", *map(str, msg)]), flush=True)
    elif env.is_main:
        print(*msg, flush=True)


def synchronize(device: torch.device) -> None:
    """Wait for queued device work; a timer that skips this measures kernel launches, not kernels."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    """Start the allocator's peak afresh: call it after setup (model, optimizer built) and warm-up, or the
    peak also counts whatever the process did before (a reference model, a previous run in a notebook)."""
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
    """This rank's GPU RNG stream (its dropout draws from it), or None on CPU.

    Only the current device's: each rank uses one GPU, and a checkpoint holding every visible GPU's state
    could not be loaded on a node that shows the rank fewer GPUs (set_rng_state_all indexes them all)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.get_rng_state(torch.cuda.current_device())
    return None


def set_device_rng_state(state) -> None:
    """Restore into the current device, whichever index it has on this node. A list (one state per GPU,
    what torch.cuda.get_rng_state_all returns) restores its entry for this device."""
    if state is None or not torch.cuda.is_available():
        return
    index = torch.cuda.current_device()
    if isinstance(state, (list, tuple)):
        state = state[index] if index < len(state) else state[0]
    torch.cuda.set_rng_state(state, index)


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """This rank's device as a list of device indices: [the GPU index] on CUDA, None on CPU (no device to bind)."""
    return [device.index] if device.type == "cuda" else None


# --------------------------------------------------------------- clocks, memory, utilisation (the step profiler's view)
def is_async(device: torch.device) -> bool:
    """Does work on this device run behind the host's back? On a GPU a call returns once its kernels are
    queued, so a host clock read between two calls measures launches, not the work."""
    return device.type == "cuda"


def stamp(device: torch.device):
    """"Now" on the device's own timeline. CPU: the host clock. GPU: an event queued on the current stream,
    timestamped when the GPU reaches it, so marking a phase costs ~5 us and never drains the queue
    (a synchronize() per mark would: 4 marks x a drained pipeline per step is what we avoid)."""
    if device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


_SIDE_STREAMS: dict = {}


def completion_stamp(device: torch.device, work):
    """A stamp the device reaches when `work` (an async collective's handle) has completed; None on CPU.
    On a GPU the collective runs on the backend's own stream and work.wait() makes the *current stream* wait,
    not the host; so a side stream (one per device, the collectives complete in order anyway) is made to
    wait for it, and an event recorded there is timestamped when the collective really ended."""
    if device.type != "cuda":
        return None
    side = _SIDE_STREAMS.setdefault(device, torch.cuda.Stream(device))
    with torch.cuda.stream(side):
        work.wait()
        return stamp(device)


def seconds_between(a, b) -> float:
    """Seconds from stamp a to stamp b (waits for b to be reached on a GPU)."""
    if isinstance(a, float):
        return b - a
    b.synchronize()
    return a.elapsed_time(b) / 1e3  # CUDA events report milliseconds


# How each backend's collectives appear in a torch.profiler trace: gloo runs them on its own threads
# (gloo:all_reduce), NCCL as kernels on a communication stream.
COLLECTIVE_TRACE_NAMES = r"gloo:all_reduce|nccl.*(AllReduce|ReduceScatter|AllGather)|ncclDevKernel|ncclKernel"


def profiler_activities(device: torch.device) -> list:
    """What torch.profiler should record here: host ops always, the GPU's kernels on a GPU."""
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def pin_memory(device: torch.device) -> bool:
    """Should a DataLoader put batches in pinned (page-locked) host memory? Only for a GPU: a copy from
    pinned memory can run asynchronously (`.to(device, non_blocking=True)`); on CPU there is no copy."""
    return device.type == "cuda"


def memory_stats(device: torch.device) -> dict:
    """On a GPU, what the caching allocator holds right now: `allocated` (live tensors) and `reserved` (taken
    from the driver). reserved - allocated is cached or fragmented: free to this process, but perhaps in
    pieces too small for the next big tensor. fragmentation = 1 - allocated/reserved. On CPU: {}."""
    if device.type != "cuda":
        return {}
    alloc, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    return {"device_allocated_bytes": alloc, "device_reserved_bytes": reserved,
            "fragmentation": 1 - alloc / reserved if reserved else 0.0}


def start_memory_history(device: torch.device, max_entries: int = 100_000) -> bool:
    """Record every allocation with its Python stack (a GPU only; ~5% slower while on). False on CPU."""
    if device.type != "cuda":
        return False
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    return True


def dump_memory_snapshot(device: torch.device, path) -> bool:
    """Write the recorded history as a pickle for https://pytorch.org/memory_viz, and stop recording."""
    if device.type != "cuda":
        return False
    torch.cuda.memory._dump_snapshot(str(path))
    torch.cuda.memory._record_memory_history(enabled=None)
    return True


_NVML: dict = {}


def gpu_utilisation(device: torch.device) -> float | None:
    """Percent of the last sample period in which a kernel ran on this GPU: NVML (the nvidia-ml-py package)
    if importable, else `nvidia-smi --query-gpu`; None on CPU or when neither answers. nvidia-smi costs
    ~50 ms a call (a process), so sample it every few seconds, not every step."""
    if device.type != "cuda":
        return None
    try:  # NVML and nvidia-smi number GPUs physically; the UUID names the one this process uses
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    except (AttributeError, RuntimeError):
        return None
    try:
        import pynvml
        if not _NVML:
            pynvml.nvmlInit()
        handle = _NVML.setdefault(uuid, pynvml.nvmlDeviceGetHandleByUUID(uuid))
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception:  # noqa: BLE001 - no NVML here: ask the command-line tool
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                              "-i", uuid], capture_output=True, text=True, timeout=5)
        return float(out.stdout.strip().splitlines()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
