"""Lab 7's measured figures for make bench: ~40 s of CPU, one process each.

    python -m bench.lab7_figures    # measure only these, merge them into bench/results.json
    python -m bench.run             # (make bench) measures them along with everything else

lab7.memory   lab 7's memory_report.py: bytes one block keeps (predicted and measured) per precision and
              recompute mode; step time per recompute mode (interleaved medians); fp32/bf16/fp16 loss curves
              with an overflow injected into one fp16 step
lab7.fast     the fast path at its two shapes: the profile, each option measured (CPU time, interleaved) and the
              reference's predict_speedup, and the step's MFU against this core's matmul ceiling
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def lab7_figures() -> dict:
    with tempfile.TemporaryDirectory() as d:  # a fresh process: one thread, nothing else imported
        subprocess.run([sys.executable, "-m", "solutions.lab7_memory.memory_report", "--out", f"{d}/m.json"],
                       check=True, capture_output=True)
        memory = json.loads(Path(f"{d}/m.json").read_text())
        fast = subprocess.run([sys.executable, "-m", "bench.lab7_figures", "--fast"], check=True, capture_output=True,
                              text=True)
    return {"memory": memory, "fast": json.loads(fast.stdout),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def fast_figures() -> dict:
    """In this process (one thread): the checker's own measurement, and the reference's predictions from it."""
    from labs.instruments import fast_path
    from solutions.lab7_memory.fast import OPTIONS, predict_speedup

    out = fast_path.run()
    for row in out.values():
        row["predicted"] = {o: predict_speedup(row["profile"], o) for o in OPTIONS}
    return out


def markdown(results: dict) -> list[str]:
    m = results.get("lab7", {}).get("memory")
    if not m:
        return []
    c = m["bytes"]["cfg"]
    lines = ["", f"Lab 7, bytes one block keeps for backward, `tiny` (h = {c['n_embd']}, a = {c['n_head']}), "
                 f"b = {c['batch']}, s = {c['seq']}:", "",
             "| precision | recompute | predicted | measured |", "|---|---|---|---|"]
    lines += [f"| {r['precision']} | {r['recompute']} | {r['predicted']:,} | {r['measured']:,} |"
              for r in m["bytes"]["rows"]]
    s = m["times"]["seconds"]
    p = m["precision"]
    lines += ["", "Lab 7, step time / no recomputation (h = 128, b = 8, s = 64): "
              + ", ".join(f"{k} {v / s['none']:.2f}x" for k, v in s.items())
              + f"; final loss after {len(p['fp32']['losses'])} steps: fp32 {p['fp32']['losses'][-1]:.4f}, "
                f"bf16 {p['bf16']['losses'][-1]:.4f}, fp16 {p['fp16']['losses'][-1]:.4f} (one step skipped)."]
    fast = results["lab7"].get("fast")
    if fast:
        lines += ["", "Lab 7, the fast path (one thread, CPU time, interleaved medians): each option's tokens/s over "
                  "the baseline's, measured / predicted from the profile by the reference's predict_speedup:", "",
                  "| shape (h, layers, heads, b, s) | step | MFU vs matmul ceiling | fused AdamW | bf16 autocast | "
                  "micro-batch x 2 |", "|---|---|---|---|---|---|"]
        for name, f in fast.items():
            cells = [f"{f['measured'][o]:.2f} / {f['predicted'][o]:.2f}" for o in ("fused_adamw", "bf16", "batch2")]
            lines.append(f"| {name} {tuple(f['profile']['shape'])} | {f['profile']['step_s'] * 1e3:.1f} ms | "
                         f"{f['mfu']:.0%} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    if sys.argv[1:] == ["--fast"]:  # the fast path alone, as JSON on stdout (lab7_figures runs it in a fresh process)
        print(json.dumps(fast_figures()))
        return
    path = Path(__file__).resolve().parent / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["lab7"] = lab7_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
