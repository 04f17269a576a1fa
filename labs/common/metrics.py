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
import time

import torch

from .model import GPTConfig
from .steplog import StepLog, read_log  # noqa: F401  (re-exported: the labs import them from here)

# Dense peak FLOP/s from datasheets (no sparsity). MFU = achieved model FLOP/s / peak.
PEAK_FLOPS = {
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
    "L40S": {"bf16": 362e12, "fp32": 91.6e12},
    "A10": {"bf16": 125e12, "fp32": 31.2e12},
}


def matmul_params(cfg: GPTConfig) -> int:
    d, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    return L * per_block + V * d


def flops_per_token(cfg: GPTConfig, seq_len: int) -> int:
    return 6 * matmul_params(cfg) + 12 * cfg.n_layer * seq_len * cfg.n_embd


def peak_flops(device_name: str, dtype: str = "fp32") -> float | None:
    """Datasheet peak for a known GPU; on CPU, COURSE_PEAK_FLOPS if set (make bench measures it)."""
    for key, peaks in PEAK_FLOPS.items():
        if key in device_name:
            return peaks[dtype]
    env = os.environ.get("COURSE_PEAK_FLOPS")
    return float(env) if env else None


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


def device_peak_flops(device, device_name: str, dtype: str = "fp32") -> float | None:
    """The MFU denominator: a GPU's datasheet peak (None for a card not in the table); on CPU
    COURSE_PEAK_FLOPS if set, else the matmul peak measured in this process."""
    if getattr(device, "type", device) == "cpu":
        env = os.environ.get("COURSE_PEAK_FLOPS")
        return float(env) if env else measured_cpu_peak()
    return peak_flops(device_name, dtype)


def mfu(tokens_per_s: float, cfg: GPTConfig, seq_len: int, peak: float | None) -> float | None:
    if not peak:
        return None
    return tokens_per_s * flops_per_token(cfg, seq_len) / peak
