"""Lab 8's measured figures for make bench: the two-node job at two link speeds, and a grade of the reference.

    sudo .venv/bin/python -m bench.lab8_figures   # measure only these, merge them into bench/results.json (and .md)
    python -m bench.run                           # (make bench) measures them along with everything else

lab8.speeds  solutions/lab8_multinode/nodes.py, 2 nodes x 2 ranks of `tiny`, FSDP and HSDP at each link speed,
             interleaved, REPEATS times: node 0's veth bytes and ms per step (steps 2..STEPS). As root only: the
             link is a real veth shaped by tc tbf; without root there is no link to count or throttle.
lab8.grade   `checker grade lab8 --solutions`: every check's value (bytes vs formula, the stall an async save saves,
             the seconds from the lost node to the first step after it) and its information rows.
"""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

RATES_MBIT = (400, 50)  # 50 MB/s and 6 MB/s: an FSDP step's ~2.2 MB crosses in ~45 ms, then ~350 ms
STRATEGIES = ("fsdp", "hsdp")
STEPS, REPEATS = 8, 2
LINE = re.compile(r"\[rank=0\].*?(\w+): ([\d.]+) kB per step across the link, (\d+) ms per step")


def one_run(rate: float, strategy: str) -> dict | None:
    """One run's figures, or None (it failed, or hung past nodes.py's own timeout, which ends its torchruns)."""
    try:
        r = subprocess.run([sys.executable, "-m", "solutions.lab8_multinode.nodes", "--rate-mbit", str(rate),
                            "--strategy", strategy, "--steps", str(STEPS), "--timeout", "240"],
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None
    m = LINE.search(r.stdout)
    return {"kb_per_step": float(m.group(2)), "ms_per_step": int(m.group(3))} if m else None


def speeds() -> dict:
    from solutions.lab4_debugging.slowlink import netns_available

    ok, why = netns_available()
    if not ok:
        return {"not_run": f"no network namespaces here ({why}): run as root"}
    runs: dict[tuple, list[dict]] = {}
    for _ in range(REPEATS):  # interleaved: a slow moment of the machine touches every pair alike
        for rate in RATES_MBIT:
            for strategy in STRATEGIES:
                got = one_run(rate, strategy)
                if got:
                    runs.setdefault((rate, strategy), []).append(got)
    rows = [{"rate_mbit": rate, "strategy": s, "runs": len(v),
             "kb_per_step": round(statistics.median(x["kb_per_step"] for x in v), 1),
             "ms_per_step": round(statistics.median(x["ms_per_step"] for x in v))}
            for (rate, s), v in runs.items()]
    return {"rows": rows, "steps": STEPS, "repeats": REPEATS}


def lab8_figures() -> dict:
    from bench.run import grade_time

    return {"speeds": speeds(), "grade": grade_time("lab8"),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(results: dict) -> list[str]:
    lab8 = results.get("lab8")
    if not lab8:
        return []
    lines = ["", "Lab 8, two nodes x 2 ranks of `tiny` over a tbf-shaped veth (solutions/lab8_multinode/nodes.py), "
                 "node 0's veth counters, medians of interleaved runs:", ""]
    sp = lab8["speeds"]
    if "rows" in sp:
        lines += ["| link | strategy | kB per step across the link | ms per step |", "|---|---|---|---|"]
        lines += [f"| {r['rate_mbit']} Mbit/s | {r['strategy']} | {r['kb_per_step']:,} | {r['ms_per_step']} |"
                  for r in sp["rows"]]
    else:
        lines.append(f"Not measured: {sp['not_run']}.")
    g = lab8["grade"]
    lines += ["", f"`checker grade lab8 --solutions`: exit {g['exit']}, {g['checker_s']} s; "
              + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in g["checks"].items())
              + " (elastic_recovery: seconds from the lost node to the first step after it; async_checkpoint: "
              "ms of stall an async save took off training's path, blocking minus async)."]
    lines += [f"- lab 8, {k}: {v}" for k, v in g["info"].items()]
    return lines


def main() -> None:
    from bench.run import write_markdown

    path = Path(__file__).resolve().parent / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["lab8"] = lab8_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results)  # bench/RESULTS.md, every section
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
