"""Lab 8's notebook figure: the chaos job of checker/labs/lab8/chaos.py on the notebook's code, once, shorter.

    python -m checker.labs.lab8.goodput_report --target labs --out goodput.json [--mtbf 4] [--steps 800] [--factor 1]

It times the save (as goodput_chaos does), asks `checkpoint_interval` for the interval at that save cost and MTBF,
scales it by --factor, runs the job killed at the chaos schedule's gaps, and writes what it measured with the
notebook code's own `predict_goodput` at the failures that came. 800 steps of 10 ms at an MTBF of 4 s: ~12 s of wall
time and 2-4 failures, against goodput_chaos's 1,600 steps and ~7 (a notebook cell, not a grade: one draw of the
failures, so the measured point scatters ~0.05 around the curve).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from checker import seams
from checker.labs.lab8 import LAB, chaos


def run(target: str, mtbf_s: float, steps: int, factor: float) -> dict:
    seam = seams.load(LAB, target)
    chaos.STEPS = steps  # read by each forked attempt
    chaos._slow_storage()
    with tempfile.TemporaryDirectory() as tmp:
        save_s = chaos.save_cost(seam, Path(tmp))
        interval_s = float(seam.checkpoint_interval(save_s, mtbf_s)) * factor
        every = max(1, min(steps, round(interval_s / chaos.STEP_S)))
        r = chaos.chaos(seam, Path(tmp), every, variant=0, mtbf_s=mtbf_s)
    m = r["measured"]
    if r.get("timeout") or r.get("exit") != 0 or not m:
        errors = [e for e in r["events"] if e["ev"] == "error"]
        raise RuntimeError(f"the chaos job did not finish (exit {r.get('exit')}, timeout {bool(r.get('timeout'))}): "
                           + (errors[-1]["message"] if errors else "no attempt logged an error"))
    predicted = float(seam.predict_goodput(m["step_s"], m["save_s"], m["restart_s"], m["mtbf_s"], every))
    return {"mtbf_s": mtbf_s, "steps": steps, "step_s": chaos.STEP_S, "save_cal_s": save_s, "interval_s": interval_s,
            "every": every, "measured": m, "predicted_at_realized_rate": predicted}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="labs", choices=("labs", "solutions"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mtbf", type=float, default=chaos.MTBF_S)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--factor", type=float, default=1.0, help="x the interval your checkpoint_interval returns")
    a = ap.parse_args(argv)
    a.out.write_text(json.dumps(run(a.target, a.mtbf, a.steps, a.factor)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
