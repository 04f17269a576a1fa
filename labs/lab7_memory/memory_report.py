# GENERATED from solutions/lab7_memory/memory_report.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Measure what this lab predicts: activation bytes per block, recomputation's cost, bf16 and fp16 training.

    python -m labs.lab7_memory.memory_report --out runs/lab7/memory.json     # ~10 s on one core

Single process, CPU (the course's reference numbers; on a GPU the attention kernel and the masks differ: see
the README). Writes one JSON: bytes (predicted by activation_bytes, measured by measure.kept_bytes) per shape,
precision and recompute mode; step time with and without recomputation, interleaved; the loss of fp32, bf16
and fp16 (with an overflow injected at one step) over the same batches.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model, get_config

from .activations import activation_bytes, activation_terms
from .amp import autocast, train_step
from .loss_scale import LossScaler
from .measure import kept_bytes
from .recompute import apply_recompute

MODES = ("none", "selective", "full")


def _model(cfg, mode="none", seed=0):
    torch.manual_seed(seed)
    model = build_model(cfg).train()
    return apply_recompute(model, mode) if mode != "none" else model


def bytes_rows(cfg, batch: int, seq: int) -> list[dict]:
    """Predicted and measured bytes per block, each precision and recompute mode."""
    rows = []
    for precision in ("fp32", "bf16"):
        for mode in MODES:
            model = _model(cfg, mode)
            x = torch.randn(batch, seq, cfg.n_embd, requires_grad=True)

            # autocast's cache of weight casts is freed as the context exits: measure after it
            def blocks(h, model=model, precision=precision):
                with autocast("cpu", precision):
                    for b in model.blocks:
                        h = b(h)
                return h
            measured = kept_bytes(model, x, blocks) // cfg.n_layer
            rows.append({"precision": precision, "recompute": mode, "measured": measured,
                         "predicted": activation_bytes(cfg, batch, seq, precision, mode),
                         "terms": activation_terms(cfg, batch, seq, precision, mode)})
    return rows


def step_times(cfg, batch: int, seq: int, reps: int = 10) -> dict:
    """Median seconds per forward+backward for each recompute mode, interleaved so load hits all alike."""
    x = torch.randint(0, cfg.vocab_size, (batch, seq))
    models = {m: _model(cfg, m) for m in MODES}
    times = {m: [] for m in MODES}
    for rep in range(reps + 1):
        for m, model in models.items():
            t0 = time.perf_counter()
            model(x, x)[1].backward()
            if rep:  # the first round warms up
                times[m].append(time.perf_counter() - t0)
    return {m: statistics.median(v) for m, v in times.items()}


def precision_curves(cfg, steps: int = 16, batch: int = 8, overflow_at: int = 8) -> dict:
    """Loss per step in fp32, bf16 and fp16 (loss scaling; an inf gradient injected at `overflow_at`)."""
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    batches = [data.batch(list(range(i * batch, (i + 1) * batch)), 64, torch.device("cpu")) for i in range(steps)]
    out = {}
    for precision in ("fp32", "bf16", "fp16"):
        model = _model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        scaler = LossScaler() if precision == "fp16" else None
        losses, scales = [], []
        for i, b in enumerate(batches):
            hook = None
            if scaler and i == overflow_at:
                hook = model.blocks[0].mlp.fc.weight.register_hook(lambda g: torch.full_like(g, float("inf")))
            torch.manual_seed(100 + i)
            losses.append(train_step(model, opt, b, precision, scaler))
            scales.append(scaler.get_scale() if scaler else None)
            if hook:
                hook.remove()
        out[precision] = {"losses": losses, "scales": scales,
                          "dtypes": sorted({str(p.dtype) for p in model.parameters()})}
    out["overflow_at"] = overflow_at
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/lab7/memory.json"))
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    tiny = get_config("tiny")
    wide = dataclasses.replace(tiny, n_embd=128, n_head=4)
    report = {"bytes": {"cfg": dict(n_embd=64, n_head=4, batch=2, seq=64), "rows": bytes_rows(tiny, 2, 64)},
              "times": {"cfg": dict(n_embd=128, n_head=4, batch=8, seq=64), "seconds": step_times(wide, 8, 64)},
              "precision": precision_curves(tiny, a.steps)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1))
    for r in report["bytes"]["rows"]:
        print(f"{r['precision']} {r['recompute']:9s} predicted {r['predicted']:>9,} B  measured {r['measured']:>9,} B")
    s = report["times"]["seconds"]
    print("step time / no recomputation: " + ", ".join(f"{m} {s[m] / s['none']:.2f}x" for m in MODES))
    p = report["precision"]
    print(f"final loss fp32 {p['fp32']['losses'][-1]:.4f} bf16 {p['bf16']['losses'][-1]:.4f} "
          f"fp16 {p['fp16']['losses'][-1]:.4f}; fp16 scale {p['fp16']['scales'][p['overflow_at'] - 1]:g} -> "
          f"{p['fp16']['scales'][p['overflow_at']]:g} at the overflow")
    return report


if __name__ == "__main__":
    main()
