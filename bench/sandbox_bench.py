"""What the sandbox costs a grade: `checker grade lab2 --solutions`, sandboxed and with --no-sandbox, interleaved.

    python -m bench.sandbox_bench          (part of make bench; alone, it updates bench/results.json)

Each pair runs the two grades back to back (order alternating), so the machine's drift (±15% run to run)
falls on both; the figure is the median of the pairs' ratios of wall time, and the medians beside it.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

LAB, PAIRS = "lab2", 3


def _grade(no_sandbox: bool) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "checker", "grade", LAB, "--solutions", *["--no-sandbox"] * no_sandbox],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"checker grade {LAB} --solutions failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def sandbox_figures(pairs: int = PAIRS) -> dict:
    from checker import sandbox

    if why := sandbox.why_not():
        return {"not_run": why}
    walls: dict[str, list[float]] = {"sandboxed": [], "not_sandboxed": []}
    for i in range(pairs):
        for no_sandbox in ((False, True) if i % 2 == 0 else (True, False)):
            walls["not_sandboxed" if no_sandbox else "sandboxed"].append(round(_grade(no_sandbox), 2))
    ratios = [s / n for s, n in zip(walls["sandboxed"], walls["not_sandboxed"])]
    return {"lab": LAB, "pairs": pairs, "wall_s": walls, "overhead": round(statistics.median(ratios) - 1, 3),
            "median_sandboxed_s": statistics.median(walls["sandboxed"]),
            "median_not_sandboxed_s": statistics.median(walls["not_sandboxed"]),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(results: dict) -> list[str]:
    sb = results.get("sandbox")
    if not sb:
        return []
    if "not_run" in sb:
        return ["", f"Sandbox overhead: not measured here ({sb['not_run']})."]
    return ["", f"Sandbox overhead (`checker grade {sb['lab']} --solutions`, {sb['pairs']} interleaved pairs, wall "
                f"time): sandboxed {sb['wall_s']['sandboxed']} s, --no-sandbox {sb['wall_s']['not_sandboxed']} s; "
                f"medians {sb['median_sandboxed_s']} s and {sb['median_not_sandboxed_s']} s; median of the pairs' "
                f"ratios: {sb['overhead']:+.1%}."]


def main() -> None:
    from bench.run import write_markdown

    path = Path(__file__).resolve().parent / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["sandbox"] = sandbox_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
