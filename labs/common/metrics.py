"""What a run reports: FLOPs per token, MFU, and a JSONL step log.

Training FLOPs per token (forward + backward = 3x forward; a matmul of a (1,k) row by a (k,n)
weight costs 2kn FLOPs forward):
    6 * N_matmul                 every weight used in a matmul: 2 FLOPs forward, 4 backward
  + 12 * L * T * d               attention scores QK^T and the weighted sum AV, per layer:
                                 2*T*d each forward (causal masking not discounted), x3 for backward
N_matmul counts the token embedding once, because the tied output head multiplies by it; the
position embedding is a lookup, not a matmul, so it is left out.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .model import GPTConfig

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


def mfu(tokens_per_s: float, cfg: GPTConfig, seq_len: int, peak: float | None) -> float | None:
    if not peak:
        return None
    return tokens_per_s * flops_per_token(cfg, seq_len) / peak


class StepLog:
    """One JSON object per line, flushed as written, so a killed run keeps every finished step.

    Opened in append mode: a resumed run continues the same file, and a reader keeps the last
    record for each step.
    """

    def __init__(self, path: str | os.PathLike | None, rank: int = 0):
        self.rank = rank
        self.f = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.f = open(path, "a", buffering=1)

    def write(self, **record) -> dict:
        record = {"rank": self.rank, "time": time.time(), **record}
        if self.f is not None:
            self.f.write(json.dumps(record) + "\n")
        return record

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def read_log(path: str | os.PathLike) -> list[dict]:
    """Records of a step log, the last one kept for each (rank, step)."""
    by_key = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            by_key[(r.get("rank", 0), r.get("step"))] = r
    return sorted(by_key.values(), key=lambda r: (r.get("step") or 0, r.get("rank", 0)))
