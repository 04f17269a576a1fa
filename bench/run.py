"""Measure the course's reference figures on this machine; write bench/results.json and RESULTS.md.

    python -m bench.run            (make bench)

Speeds are medians of repeated windows in one process (this machine's run-to-run noise is ~15%),
each rank's setting: one CPU thread. Slides and READMEs quote these files, never hand-typed numbers.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from labs.common import dist as cdist
from labs.common.data import BatchSampler, TokenFile, ensure_corpus
from labs.common.metrics import flops_per_token
from labs.common.model import build_model, count_params, get_config
from labs.common.optim import make_optimizer, make_scheduler
from solutions.lab1_baseline import model_state_bytes, train_step

from .lab5_bench import lab5_figures
from .lab5_bench import markdown as lab5_markdown
from .lab7_figures import lab7_figures
from .lab7_figures import markdown as lab7_markdown
from .lab8_figures import lab8_figures
from .lab8_figures import markdown as lab8_markdown
from .lab9_figures import lab9_figures
from .lab9_figures import markdown as lab9_markdown
from .lab10_figures import lab10_figures
from .lab10_figures import markdown as lab10_markdown
from .lab_figures import lab4_figures, lab4_forensics, lab6_figures
from .lab_figures import markdown as lab_figures_markdown
from .profiler_bench import overhead as profiler_overhead
from .sandbox_bench import markdown as sandbox_markdown
from .sandbox_bench import sandbox_figures

OUT = Path(__file__).resolve().parent


def cpu_matmul_peak(n: int = 1024, reps: int = 5) -> float:
    """FLOP/s of a square fp32 matmul on one thread: the CPU 'peak' MFU is quoted against."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def model_figures(config: str, batch: int, seq: int, windows: int, steps: int, peak: float) -> dict:
    torch.manual_seed(0)
    cfg = get_config(config)
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    model = build_model(cfg)
    opt = make_optimizer(model)
    sched = make_scheduler(opt, warmup=10, total=1000)
    sampler = BatchSampler(data.num_windows(seq), batch)
    batches = [data.batch(sampler.next_ids(), seq) for _ in range(steps)]
    train_step(model, opt, sched, batches[0])  # warm-up
    rates = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for b in batches:
            train_step(model, opt, sched, b)
        rates.append(batch * seq * steps / (time.perf_counter() - t0))
    tps = statistics.median(rates)
    psi, tensors = count_params(model), len(list(model.parameters()))
    return {"config": config, "params": psi, "batch": batch, "seq_len": seq, "tokens_per_s": round(tps),
            "tokens_per_s_windows": [round(r) for r in rates],
            "mfu_vs_cpu_matmul": round(tps * flops_per_token(cfg, seq) / peak, 4),
            "model_state_bytes": model_state_bytes(model, opt)["total"], "formula_bytes": 16 * psi + 4 * tensors}


def grade_time(lab: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "checker", "grade", lab, "--solutions", "--json", f"{d}/r.json"],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        rep = json.loads(Path(f"{d}/r.json").read_text())
    return {"lab": lab, "exit": r.returncode, "wall_s": round(wall, 1), "checker_s": rep["seconds"],
            "checks": {c["name"]: c["value"] for c in rep["checks"]},
            "info": {i["name"]: i["value"] for i in rep.get("info", []) if not i["name"].startswith("run ")}}


def torchrun(nproc: int, module: str, *args: str):
    """Run `module` on nproc ranks; it writes its JSON result to the path given as its last argument."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                        "-m", module, *args, f"{d}/out.json"], check=True, capture_output=True)
        return json.loads(Path(f"{d}/out.json").read_text())


def mutation_figures() -> dict:
    """The kill rate per lab: every mutant in tests/mutants graded against the check named beside it
    (`python -m tests.mutants`, the same grades tests/test_mutants.py runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mutants.json"
        subprocess.run([sys.executable, "-m", "tests.mutants", "--json", str(out)], cwd=OUT.parent, check=True)
        return json.loads(out.read_text())


def mutation_markdown(results: dict) -> list[str]:
    rows = results.get("mutants") or {}
    lines = ["", "Mutants of the reference (tests/mutants/), each graded with `--only` the check named beside it:", "",
             "| lab | mutants | killed | survived | not run here |", "|---|---|---|---|---|"]
    for lab, r in rows.items():
        lines.append(f"| {lab} | {r['mutants']} | {r['killed']} | {', '.join(r['survived']) or '-'} | "
                     f"{', '.join(r.get('not_run', [])) or '-'} |")
    return lines if rows else []


def main() -> None:
    torch.set_num_threads(1)
    peak = cpu_matmul_peak()
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch": torch.__version__, "device": cdist.device_name(torch.device("cpu")),
                    "cpu_matmul_flops_1thread": round(peak)},
        "models": [model_figures("tiny", 16, 64, windows=5, steps=10, peak=peak),
                   model_figures("small", 8, 256, windows=3, steps=3, peak=peak)],
        "ddp": [torchrun(1, "bench.dist_bench", "ddp"), torchrun(2, "bench.dist_bench", "ddp")],
        "allreduce": torchrun(2, "bench.dist_bench", "allreduce"),
        "sharding": torchrun(2, "solutions.lab3_sharding.compare", "--out"),
        "profiler": profiler_overhead(),
        "grades": [grade_time("lab1"), grade_time("lab2"), grade_time("lab3")],
        "sandbox": sandbox_figures(),
        "lab4": lab4_figures(),
        "lab4_forensics": lab4_forensics(),
        "lab5": lab5_figures(),
        "lab6": lab6_figures(),
        "lab7": lab7_figures(),
        "lab8": lab8_figures(),
        "lab9": lab9_figures(),
        "lab10": lab10_figures(),
        "mutants": mutation_figures(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    (OUT / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(write_markdown(results))


def write_markdown(results: dict) -> str:
    """bench/RESULTS.md from results.json's contents; returns the text."""
    peak = results["machine"]["cpu_matmul_flops_1thread"]
    lines = [f"# Benchmark results ({results['measured_at']})", "",
             f"Machine: {results['machine']['cores']} cores, torch {results['machine']['torch']}, "
             f"one thread per process; fp32 matmul peak on one thread "
             f"{peak / 1e9:.1f} GFLOP/s (the CPU MFU reference).", "",
             "| model | params | batch x seq | tokens/s | MFU vs matmul peak | model-state bytes | 16Ψ + 4·tensors |",
             "|---|---|---|---|---|---|---|"]
    for m in results["models"]:
        lines.append(f"| {m['config']} | {m['params']:,} | {m['batch']} x {m['seq_len']} | {m['tokens_per_s']:,} | "
                     f"{m['mfu_vs_cpu_matmul']:.1%} | {m['model_state_bytes']:,} | {m['formula_bytes']:,} |")
    one, two = results["ddp"]
    lines += ["", "Data parallel, `tiny`, 16 x 64 tokens per rank (weak scaling), medians of interleaved windows:", "",
              "| ranks | naive tokens/s | bucketed tokens/s | torch DDP tokens/s | bucketed / torch |",
              "|---|---|---|---|---|"]
    for r in results["ddp"]:
        t = r["tokens_per_s"]
        lines.append(f"| {r['world_size']} | {t['naive']:,} | {t['bucketed']:,} | {t['torch']:,} | "
                     f"{r['bucketed_over_torch']} |")
    eff = {k: two["tokens_per_s"][k] / (2 * one["tokens_per_s"][k]) for k in one["tokens_per_s"]}
    lines += ["", "Scaling efficiency at 2 ranks, tokens/s(2) / (2 x tokens/s(1)): " +
              ", ".join(f"{k} {v:.0%}" for k, v in eff.items()), "",
              f"All-reduce on {results['allreduce']['backend']}, {results['allreduce']['world_size']} ranks "
              "(busbw = algbw x 2(n-1)/n):", "", "| bytes | ms | algbw GB/s | busbw GB/s |", "|---|---|---|---|"]
    for r in results["allreduce"]["rows"]:
        lines.append(f"| {r['bytes']:,} | {r['ms']} | {r['algbw_GBps']} | {r['busbw_GBps']} |")
    lines += ["", "Sharding side by side, `tiny`, 2 ranks, fp32 AdamW (DeepSpeed: persistent weights + fp32 master "
              "partition + moments; the others: weights + grads + moments, local shards):", "",
              "| strategy | bytes/param/rank measured | formula | tokens/s | checkpoint files | checkpoint MB "
              "| sent/rank/step, x DDP's 2·4Ψ(N-1)/N |",
              "|---|---|---|---|---|---|---|"]
    for r in results["sharding"]:
        lines.append(f"| {r['strategy']} | {r['bytes_per_param']:.3f} | {r['bytes_formula'] / r['psi']:.3f} | "
                     f"{r['tokens_per_s']:,.0f} | {len(r['checkpoint'])} | {sum(r['checkpoint'].values()) / 1e6:.2f} "
                     f"| {r.get('sent_over_ddp') or 0:.3f} |")
    lines += ["", "| grade | exit | wall s | checker s |", "|---|---|---|---|"]
    for g in results["grades"]:
        lines.append(f"| `checker grade {g['lab']} --solutions` | {g['exit']} | {g['wall_s']} | {g['checker_s']} |")
    prof = results["profiler"]
    lines += ["", "Step profiler (labs/instruments/profiler.py), always on: "
              f"`tiny`, {prof['pairs']} interleaved pairs of "
              f"{prof['steps_per_window']}-step windows (A B A B ...): {prof['tokens_per_s_without']:,} tokens/s "
              f"without, {prof['tokens_per_s_with']:,} with; overhead {prof['overhead']:.1%} (median of the pairs' "
              f"ratios; {prof['overhead_of_medians']:.1%} from the medians). Its bookkeeping alone: "
              f"{prof['bookkeeping_us_per_step']} us per step.", "", "What the grades measured (information rows):", ""]
    for g in results["grades"]:
        for name, value in g["info"].items():
            lines.append(f"- lab {g['lab'][-1]}, {name}: {value}")
    lines += sandbox_markdown(results) + lab_figures_markdown(results) + lab5_markdown(results)
    lines += lab7_markdown(results) + lab8_markdown(results) + lab9_markdown(results) + lab10_markdown(results)
    lines += mutation_markdown(results)
    text = "\n".join(lines) + "\n"
    (OUT / "RESULTS.md").write_text(text)
    return text


if __name__ == "__main__":
    main()
