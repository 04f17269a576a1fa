"""Lab 9's measured figures for make bench: the reference measured by the checker's own instruments, and a grade.

    python -m bench.lab9_figures    # measure only these, merge them into bench/results.json (and .md)
    python -m bench.run             # (make bench) measures them along with everything else

lab9.figures  checker/labs/lab9/report.py on 4 ranks (one launch, ~10 s of 2 cores): bytes kept for backward by the
              textbook formula, flash and the ring per rank (N = 2, 4) at each sequence length, vs 4(3bhsd + bhs)/N;
              bytes each rank sends in the ring and in Ulysses (counted from its sends and collectives) vs the
              formulas; per-rank matmul FLOPs of the causal ring (N = 4), plain and zig-zag, and CPU seconds of each
              rank's share run alone, vs the (query, key) pairs.
lab9.grade    `checker grade lab9 --solutions`: every check's value and its wall time.
"""
from __future__ import annotations

import json
import time
from pathlib import Path


def lab9_figures() -> dict:
    from bench.run import grade_time
    from checker.api import long_context_figures

    return {"figures": long_context_figures("solutions"), "grade": grade_time("lab9"),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(results: dict) -> list[str]:
    lab9 = results.get("lab9")
    if not lab9:
        return []
    f = lab9["figures"]
    one, rings = f["1"], {n: f[str(n)] for n in (2, 4)}
    b, h, d = one["shape"]
    lines = ["", f"Lab 9, bytes attention keeps for backward, fp32, b = {b}, h = {h}, d = {d}, causal (the storages "
                 "the autograd graph holds after forward, the output aside; checker/labs/lab9/report.py):", "",
             "| s | textbook | flash | formula 4(3bhsd + bhs) | ring per rank, N = 2 | ring per rank, N = 4 |",
             "|---|---|---|---|---|---|"]
    for i, s in enumerate(one["lengths"]):
        lines.append(f"| {s} | {one['memory']['naive'][i]:,} | {one['memory']['flash'][i]:,} | "
                     f"{one['memory']['formula'][i]:,} | {max(r[i] for r in rings[2]['memory']['ring']):,} | "
                     f"{max(r[i] for r in rings[4]['memory']['ring']):,} |")
    lines += ["", "Lab 9, bytes each rank sends per attention layer (b = 1, h = 2N, s = 512, d = 16, fp32), counted "
                  "from its sends and collectives, the largest rank's; and its rows vs full attention:", "",
              "| N | kind | forward | formula | backward | formula | max abs diff |", "|---|---|---|---|---|---|---|"]
    for n, r in rings.items():
        for kind in ("ring", "ulysses"):
            per = r["bytes"][kind]["per_rank"]
            fw, bw = r["bytes"][kind]["formula"]
            lines.append(f"| {n} | {kind} | {max(x['forward'] for x in per):,.0f} | {fw:,.0f} | "
                         f"{max(x['backward'] for x in per):,.0f} | {bw:,.0f} | {max(x['diff'] for x in per):.1e} |")
    bal, alone = rings[4]["balance"], one["balance"]["rows"]
    lines += ["", f"Lab 9, per-rank causal work, N = 4, s = {bal['s']}, tiles {bal['tile']}: (query, key) pairs "
                  "(predicted), matmul FLOPs of the ring's forward + backward (measured), CPU seconds of each rank's "
                  "share run alone (measured, best of 3):", "",
              "| split | pairs per rank | FLOPs per rank | seconds per rank | max/min pairs, FLOPs, seconds |",
              "|---|---|---|---|---|"]
    for layout in ("contiguous", "zigzag"):
        p, fl, sec = bal["rows"][layout]["pairs"], bal["rows"][layout]["flops"], alone[f"4/{layout}"]["seconds"]
        lines.append(f"| {layout} | {', '.join(f'{x:,}' for x in p)} | {', '.join(f'{x / 1e6:.0f} M' for x in fl)} | "
                     f"{', '.join(f'{1e3 * x:.1f} ms' for x in sec)} | {max(p) / min(p):.2f}, "
                     f"{max(fl) / min(fl):.2f}, {max(sec) / min(sec):.2f} |")
    g = lab9["grade"]
    lines += ["", f"`checker grade lab9 --solutions`: exit {g['exit']}, {g['checker_s']} s (wall {g['wall_s']} s); "
              + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in g["checks"].items())]
    return lines


def main() -> None:
    from bench.run import write_markdown

    path = Path(__file__).resolve().parent / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["lab9"] = lab9_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results)  # bench/RESULTS.md, every section
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
