"""What a run reports: FLOPs per token, MFU (against a datasheet or a measured peak), and a JSONL step log
(StepLog and read_log live in steplog.py, which needs no torch, and are re-exported here).

Training FLOPs per token (forward + backward = 3x forward; a matmul of a (1,k) row by a (k,n)
weight costs 2kn FLOPs forward):
    6 * N_matmul                 every weight used in a matmul: 2 FLOPs forward, 4 backward
  + 12 * L * T * d               attention scores QK^T and the weighted sum AV, per layer:
                                 2*T*d each forward (causal masking not discounted), x3 for backward
N_matmul counts the token embedding once, because the tied output head multiplies by it; the
position embedding is a lookup, not a matmul, so it is left out.
"""
from __future__ import annotations

import functools
import os
import sys
import time

import torch

from .model import GPTConfig
from .steplog import StepLog, read_log  # noqa: F401  (re-exported: the labs import them from here)

# Dense peak FLOP/s per GPU model (no 2:4 sparsity: the datasheets' starred figures are halved), keyed by the
# exact name torch.cuda.get_device_name() reports, so an H100 PCIe never gets the SXM figures.
#   bf16  tensor cores, bf16 inputs with fp32 accumulate (what --precision bf16 runs)
#   tf32  tensor cores on fp32 tensors (torch.set_float32_matmul_precision("high"))
#   fp32  plain FP32 units (torch's default for fp32 matmuls)
# Sources (vendors' datasheets): nvidia.com/en-us/data-center/h200 (H200 SXM / NVL), .../h100 (H100 datasheet:
# SXM, PCIe, NVL), .../a100 (A100 datasheet: SXM4 and PCIe, 40 and 80 GB alike), .../l40s, .../l4, .../products/a10-gpu,
# and the NVIDIA Ada Lovelace architecture whitepaper, appendix table (GeForce RTX 4090: bf16 with fp32
# accumulate). The A10G (AWS g5) has no NVIDIA datasheet: AWS's figures as baseten.co/blog/nvidia-a10-vs-a10g
# quotes them (half the A10's tensor rate).
_T = 1e12
_H100_SXM = {"bf16": 989.4 * _T, "tf32": 494.7 * _T, "fp32": 67 * _T}
_H100_NVL = {"bf16": 835.5 * _T, "tf32": 417.5 * _T, "fp32": 60 * _T}
_A100 = {"bf16": 312 * _T, "tf32": 156 * _T, "fp32": 19.5 * _T}
PEAK_FLOPS = {
    "NVIDIA H200": _H100_SXM,  # H200 SXM: the H100 SXM's compute with more, faster HBM
    "NVIDIA H200 NVL": _H100_NVL,
    "NVIDIA H100 80GB HBM3": _H100_SXM,  # what an H100 SXM5 calls itself
    "NVIDIA H100 PCIe": {"bf16": 756 * _T, "tf32": 378 * _T, "fp32": 51 * _T},
    "NVIDIA H100 NVL": _H100_NVL,
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    "NVIDIA L40S": {"bf16": 362.05 * _T, "tf32": 183 * _T, "fp32": 91.6 * _T},
    "NVIDIA L4": {"bf16": 121 * _T, "tf32": 60 * _T, "fp32": 30.3 * _T},
    "NVIDIA A10": {"bf16": 125 * _T, "tf32": 62.5 * _T, "fp32": 31.2 * _T},
    "NVIDIA A10G": {"bf16": 70 * _T, "tf32": 35 * _T, "fp32": 35 * _T},
    "NVIDIA GeForce RTX 4090": {"bf16": 165.2 * _T, "tf32": 82.6 * _T, "fp32": 82.6 * _T},
}


def matmul_params(cfg: GPTConfig) -> int:
    d, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    return L * per_block + V * d


def flops_per_token(cfg: GPTConfig, seq_len: int) -> int:
    return 6 * matmul_params(cfg) + 12 * cfg.n_layer * seq_len * cfg.n_embd


def peak_flops(device_name: str, dtype: str = "fp32") -> float | None:
    """Datasheet peak for a GPU of exactly this name (None if not in the table); COURSE_PEAK_FLOPS (what
    --peak-tflops sets, in FLOP/s) wins over the table: the user knows their clocks and power caps."""
    env = os.environ.get("COURSE_PEAK_FLOPS")
    if env:
        return float(env)
    peaks = PEAK_FLOPS.get(device_name.strip())
    return peaks[dtype] if peaks else None


def measured_cpu_peak() -> float:
    """FLOP/s of a square fp32 matmul on this machine, with this process's threads (measured once per
    process and thread count).

    Why measure on CPU: a CPU has no single datasheet number. Its peak depends on the core count the
    process may use (one per rank here), the vector width the build uses (AVX2 vs AVX-512), the clock
    it turbos to and what else shares the machine, so the only honest denominator is the best dense
    matmul this process achieves here, now. A 1024^3 matmul is 2 x 1024^3 = 2.1 GFLOP (~25 ms at
    ~90 GFLOP/s on one core): large enough to run at full speed. The fastest of `reps` is kept: other
    processes can only slow a run down, never speed it up.
    """
    return _matmul_flops(torch.get_num_threads())


@functools.lru_cache(maxsize=None)
def _matmul_flops(threads: int, n: int = 1024, reps: int = 3) -> float:
    g = torch.Generator().manual_seed(0)  # its own generator: measuring must not move the training RNG
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    a @ b  # warm-up: page in, pick the kernel
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def device_peak_or_none(device, device_name: str, dtype: str = "fp32", peak_tflops: float | None = None):
    """(the MFU denominator, None) for a run in `dtype` ("bf16", "tf32", "fp32": labs.common.precision.peak_key),
    or (None, what to do) for a GPU not in the table: MFU against a guessed peak would be a made-up number.
    `peak_tflops` (a script's --peak-tflops) wins; then COURSE_PEAK_FLOPS; then a GPU's datasheet peak or,
    on CPU, the matmul peak measured in this process."""
    if peak_tflops:
        return peak_tflops * 1e12, None
    if getattr(device, "type", device) == "cpu":
        env = os.environ.get("COURSE_PEAK_FLOPS")
        return (float(env) if env else measured_cpu_peak()), None
    peak = peak_flops(device_name, dtype)
    if peak is None:
        return None, (f"unknown GPU {device_name!r}: its {dtype} peak is not in labs/common/metrics.py's table; "
                      f"pass --peak-tflops N (its dense {dtype} TFLOP/s from the datasheet) or set COURSE_PEAK_FLOPS")
    return peak, None


_SAID: set = set()


def device_peak_flops(device, device_name: str, dtype: str = "fp32", peak_tflops: float | None = None) -> float | None:
    """device_peak_or_none's peak; for an unknown GPU None (so MFU is None), said once on stderr."""
    peak, why = device_peak_or_none(device, device_name, dtype, peak_tflops)
    if why and why not in _SAID:
        _SAID.add(why)
        print(f"MFU not computed: {why}", file=sys.stderr, flush=True)
    return peak


def mfu(tokens_per_s: float, cfg: GPTConfig, seq_len: int, peak: float | None) -> float | None:
    if not peak:
        return None
    return tokens_per_s * flops_per_token(cfg, seq_len) / peak
