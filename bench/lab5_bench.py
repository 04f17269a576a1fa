"""Lab 5's measured figures, on the real Slurm of this machine: the scaling sweep and a requeue round trip.

    python -m bench.lab5_bench      # measure only these, merge them into bench/results.json, rewrite RESULTS.md

The same jobs the checker runs, longer: the reference sweep (1 and 2 ranks, one at a time, 150 steps)
and a 2-rank job warned at step 20, whose log times how long the requeue took and where it resumed.
No Slurm here: {"skipped": why}, and the slides show their "not measured" panel.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from checker import slurm

ROOT = Path(__file__).resolve().parents[1]
STEPS = 150
WARN_AT = 20


def _events(log: Path) -> list[dict]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if "event" in r] if log.exists() else []


def lab5_figures() -> dict:
    why = slurm.unavailable()
    if why:
        return {"skipped": why}
    from solutions.lab5_scheduler.jobmetrics import collect
    from solutions.lab5_scheduler.report import scaling_table
    from solutions.lab5_scheduler.sweep import sbatch_env, submit_sweep

    runs = Path(tempfile.mkdtemp(prefix="bench-lab5-"))
    env = {**sbatch_env(runs, "--steps 60 --step-sleep 0.05"), "PYTHONPATH": str(ROOT)}
    job, said = slurm.sbatch(ROOT / "solutions/lab5_scheduler/train.sbatch",
                             ["--job-name=bench-preempt", f"--output={runs}/slurm-%j.log"], env)
    if not job:
        return {"skipped": f"sbatch: {said}"}
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT)  # the sweep's jobs import the course from the repository
    try:
        array = submit_sweep([1, 2], runs, f"--steps {STEPS}")
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)
    log = runs / job / "log.jsonl"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and sum(1 for line in (log.read_text().splitlines() if log.exists() else [])
                                              if '"loss"' in line) < WARN_AT:
        time.sleep(0.1)
    warned = time.time()
    slurm.signal_batch(job)
    left = slurm.wait_all([job, array], deadline)
    slurm.cancel(left)
    rows = collect(slurm.jobcomp_path(), runs)
    table = scaling_table(rows)
    ev = _events(log)
    stop = next((e for e in ev if e["event"] == "preempted"), {})
    restart = next((e for e in ev if e["event"] == "start" and e.get("restart_count") == 1), {})
    version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "slurm": version, "steps": STEPS, "config": "tiny", "batch_per_rank": 16, "seq": 64,
        "scaling": [{k: t[k] for k in ("world_size", "tokens_per_s", "speedup", "efficiency")} for t in table],
        "jobs": rows,
        "requeue": {"warned_at_step": WARN_AT, "stopped_at_step": stop.get("at_step"),
                    "resumed_from": restart.get("resumed_from"),
                    "warning_to_checkpoint_s": round(stop["time"] - warned, 2) if stop else None,
                    "warning_to_restart_s": round(restart["time"] - warned, 2) if restart else None},
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(results: dict) -> list[str]:
    lab5 = results.get("lab5") or {}
    if not lab5.get("scaling"):
        return ["", f"Lab 5: not measured ({lab5.get('skipped', 'run `make bench` where Slurm runs')})."]
    lines = ["", f"Lab 5, weak scaling on {lab5['slurm']} (one node, jobs one at a time, `{lab5['config']}` GPT, "
                 f"batch {lab5['batch_per_rank']} x {lab5['seq']} per rank, {lab5['steps']} steps; median tokens/s "
                 "over the steps):", "",
             "| world size | tokens/s | speedup | efficiency |", "|---|---|---|---|"]
    lines += [f"| {t['world_size']} | {t['tokens_per_s']:,.0f} | {t['speedup']:.2f}x | {t['efficiency']:.0%} |"
              for t in lab5["scaling"]]
    rq = lab5["requeue"]
    if rq.get("warning_to_restart_s") is not None:
        lines += ["", f"Preemption warning (USR1) at step {rq['warned_at_step']}: checkpoint written at step "
                      f"{rq['stopped_at_step']} {rq['warning_to_checkpoint_s']} s later; the requeued run started "
                      f"{rq['warning_to_restart_s']} s after the warning and resumed from step {rq['resumed_from']}."]
    return lines


def main() -> None:
    from .run import OUT as RUN_OUT
    from .run import write_markdown
    path = RUN_OUT / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["lab5"] = lab5_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(write_markdown(results) if "models" in results else "\n".join(markdown(results)))
    return 0 if results["lab5"].get("scaling") else 1


if __name__ == "__main__":
    sys.exit(main())
