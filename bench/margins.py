"""How far the reference sits from each threshold: grade a lab's solutions N times, one table row per check.

    .venv/bin/python -m bench.margins lab4 lab6 --repeats 3 >> bench/MARGINS.md

A check whose reference value sits close to its threshold fails a correct learner on a loaded machine:
such a check should measure a steadier quantity, not get a wider threshold. Checks without a numeric
value (pass/fail by content: digests, counts that must be exact) show "exact".
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def grade(lab: str) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "checker", "grade", lab, "--solutions", "--json", str(out)], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ})
        seconds = time.monotonic() - t0
        report = json.loads(out.read_text())
    return seconds, {c["name"]: c for c in report["checks"]}


def _fmt(x) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def table(lab: str, grades: list[tuple[float, dict]]) -> str:
    lines = [f"### {lab}: {len(grades)} grades of the reference, {', '.join(f'{s:.0f} s' for s, _ in grades)}",
             "", "| check | passed | measured (each grade) | threshold | unit |", "|---|---|---|---|---|"]
    for name in grades[0][1]:
        rows = [g[name] for _, g in grades]
        values = [r.get("value") for r in rows]
        shown = ", ".join(_fmt(v) for v in values) if any(v is not None for v in values) else "exact"
        lines.append(f"| {name} | {sum(r['passed'] for r in rows)}/{len(rows)} | {shown} | "
                     f"{_fmt(rows[0].get('threshold'))} | {rows[0].get('unit', '')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labs", nargs="+")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    for lab in args.labs:
        grades = []
        for _ in range(args.repeats):
            grades.append(grade(lab))
            print(table(lab, grades), file=sys.stderr, flush=True)  # so far: a cut run still says something
            print(f"<!-- {lab} grade {len(grades)}: {grades[-1][0]:.0f} s -->", file=sys.stderr, flush=True)
        print(table(lab, grades), flush=True)


if __name__ == "__main__":
    main()
