"""How far the reference sits from each threshold: grade a lab's solutions N times, one table row per check.

    .venv/bin/python -m bench.margins lab4 lab6 --repeats 3 >> bench/MARGINS.md
    .venv/bin/python -m bench.margins lab1 lab2 --repeats 10 --paired >> bench/MARGINS.md

--paired grades the labs two by two at once (load ~2 on 2 cores: each grade has another beside it the whole
time); the one that finishes its repeats first goes on grading, uncounted, until the other is done.

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
import threading
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


def table(lab: str, grades: list[tuple[float, dict]], beside: str = "") -> str:
    """One lab's grades as markdown; `beside`: the lab graded alongside each one (--paired)."""
    where = f"each beside a grade of {beside}, " if beside else ""
    lines = [f"### {lab}: {len(grades)} grades of the reference, {where}"
             f"{', '.join(f'{s:.0f} s' for s, _ in grades)}",
             "", "| check | passed | measured (each grade) | threshold | unit |", "|---|---|---|---|---|"]
    for name in grades[0][1]:
        rows = [g[name] for _, g in grades]
        values = [r.get("value") for r in rows]
        shown = ", ".join(_fmt(v) for v in values) if any(v is not None for v in values) else "exact"
        lines.append(f"| {name} | {sum(r['passed'] for r in rows)}/{len(rows)} | {shown} | "
                     f"{_fmt(rows[0].get('threshold'))} | {rows[0].get('unit', '')} |")
    return "\n".join(lines) + "\n"


def paired(a: str, b: str, repeats: int) -> dict[str, list[tuple[float, dict]]]:
    """`repeats` grades of each of two labs, the two always running at once."""
    grades = {a: [], b: []}
    done = threading.Event()

    def loop(lab: str, other: str) -> None:
        try:
            while not done.is_set():
                g = grade(lab)
                if len(grades[lab]) < repeats:
                    grades[lab].append(g)
                    print(f"<!-- {lab} grade {len(grades[lab])}: {g[0]:.0f} s -->", file=sys.stderr, flush=True)
                if len(grades[lab]) >= repeats and len(grades[other]) >= repeats:
                    done.set()
        finally:
            done.set()  # a grade that wrote no report stops its partner too

    threads = [threading.Thread(target=loop, args=pair) for pair in ((a, b), (b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return grades


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("labs", nargs="+")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--paired", action="store_true", help="grade the labs two by two, at once")
    args = ap.parse_args(argv)
    if args.paired:
        if len(args.labs) % 2:
            ap.error("--paired needs an even number of labs")
        for a, b in zip(args.labs[::2], args.labs[1::2]):
            for lab, grades in paired(a, b, args.repeats).items():
                print(table(lab, grades, beside=b if lab == a else a), flush=True)
        return
    for lab in args.labs:
        grades = []
        for _ in range(args.repeats):
            grades.append(grade(lab))
            print(table(lab, grades), file=sys.stderr, flush=True)  # so far: a cut run still says something
            print(f"<!-- {lab} grade {len(grades)}: {grades[-1][0]:.0f} s -->", file=sys.stderr, flush=True)
        print(table(lab, grades), flush=True)


if __name__ == "__main__":
    main()
