"""Lab 8's measured figures for make bench: the two-node job at two link speeds, and a grade of the reference.

    sudo .venv/bin/python -m bench.lab8_figures   # measure only these, merge them into bench/results.json (and .md)
    .venv/bin/python -m bench.lab8_figures goodput  # only the goodput curve (~3 min), merged the same way
    python -m bench.run                           # (make bench) measures them along with everything else

lab8.speeds  solutions/lab8_multinode/nodes.py, 2 nodes x 2 ranks of `tiny`, FSDP and HSDP at each link speed,
             interleaved, REPEATS times: node 0's veth bytes and ms per step (steps 2..STEPS). As root only: the
             link is a real veth shaped by tc tbf; without root there is no link to count or throttle.
lab8.goodput checker/labs/lab8/chaos.py's chaos job on the reference's checkpoints, at MTBFS and at INTERVALS x the
             Young-Daly interval for the save cost it timed: goodput measured (useful step time / wall time) against
             the first-order prediction for the run's own step, save and restart times, and where each failure's
             time went (work redone, restart; save stalls per failure of wall time).
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


MTBFS = (4.0, 8.0)           # seconds: the chaos check's, and twice it
INTERVALS = (0.5, 1.0, 2.0)  # x the Young-Daly interval for the timed save cost


def goodput(variant: int = 0) -> dict:
    """The chaos job at each MTBF and interval: measured goodput, the prediction for its own times, the breakdown."""
    import tempfile

    from checker.labs.lab8 import chaos as ch
    from solutions import lab8_multinode as seam

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ch._slow_storage()
        save_s = ch.save_cost(seam, Path(tmp))
        for mtbf in MTBFS:
            for factor in INTERVALS:
                every = max(1, round(factor * ch.young_daly(save_s, mtbf) / ch.STEP_S))
                root = Path(tmp) / f"m{mtbf}_x{factor}"
                root.mkdir()
                r = ch.chaos(seam, root, every, variant, mtbf_s=mtbf)
                m = r["measured"]
                if r.get("timeout") or r.get("exit") != 0 or not m:
                    rows.append({"mtbf_s": mtbf, "factor": factor, "every": every, "failed": True})
                    continue
                rows.append({"mtbf_s": mtbf, "factor": factor, "every": every, "failures": m["failures"],
                             "wall_s": round(m["wall_s"], 2), "measured": round(m["goodput"], 3),
                             "predicted": round(ch.goodput(m["step_s"], m["save_s"], m["restart_s"], mtbf, every), 3),
                             "per_failure_s": {k: round(v, 3) for k, v in m["per_failure_s"].items()}})
    return {"save_s": round(save_s, 3), "step_s": ch.STEP_S, "variant": variant, "rows": rows}


def lab8_figures() -> dict:
    from bench.run import grade_time

    return {"speeds": speeds(), "goodput": goodput(), "grade": grade_time("lab8"),
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
    gp = lab8.get("goodput")
    if gp:
        lines += ["", "Lab 8, goodput under chaos (checker/labs/lab8/chaos.py's job on the reference: "
                      f"{gp['step_s'] * 1e3:.0f} ms steps, a timed save of {gp['save_s'] * 1e3:.0f} ms, failures at "
                      "stratified exponential gaps): measured against the first-order prediction for the run's own "
                      "times at the stated MTBF, and each failure's time (work redone, restart) with the save "
                      "stalls per failure:", "",
                  "| MTBF | interval (x Young-Daly) | saves every | failures | goodput measured | predicted | "
                  "redone / failure | restart | save stalls / failure |", "|---|---|---|---|---|---|---|---|---|"]
        for r in gp["rows"]:
            if r.get("failed"):
                lines.append(f"| {r['mtbf_s']} s | {r['factor']} | {r['every']} steps | did not finish | | | | | |")
                continue
            b = r["per_failure_s"]
            lines.append(f"| {r['mtbf_s']} s | {r['factor']} | {r['every']} steps | {r['failures']} | "
                         f"{r['measured']} | {r['predicted']} | {b['redone']} s | {b['restart']} s | "
                         f"{b['save_stalls']} s |")
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
    if sys.argv[1:] == ["goodput"]:
        results.setdefault("lab8", {})["goodput"] = goodput()
    else:
        results["lab8"] = lab8_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results)  # bench/RESULTS.md, every section
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
