"""Instructor mode: grade a folder of submissions, a few at a time, into one class report.

    checker grade lab2 --submissions hand-ins/ --parallel 1 --report-dir class-report/

Each folder in hand-ins/ is one learner's copy of labs/ (it holds lab2_ddp/, ...). Each learner is
graded by its own `checker grade` process against a private course tree (the course's shared core
and reference; the learner's lab folder), with a hidden variant (other seeds, data order, kill
steps, world sizes) so that hard-coded answers fail. A learner whose code hangs or crashes fails
their own checks; the batch goes on. Writes class.csv (learner, check, passed, value, ...),
class.junit.xml (one testsuite per learner, for an LMS or CI) and prints a summary table.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.table import Table

from checker import seams
from checker.harness import REPO_ROOT

LEARNER_BUDGET_S = 600  # one learner's whole grade: above the sum of any lab's run budgets (lab 2: 450 s)


def _course_tree(lab: str, submission: Path, into: Path) -> Path:
    """A private root: labs/ = the course's shared core + this learner's lab folder; solutions/ = the course's."""
    folder = seams.SEAMS[lab].folder
    (into / "labs").mkdir(parents=True)
    (into / "labs" / "__init__.py").write_text("")
    (into / "labs" / "common").symlink_to(REPO_ROOT / "labs" / "common")  # never the learner's copy of the core
    if (submission / folder).is_dir():
        shutil.copytree(submission / folder, into / "labs" / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (into / "solutions").symlink_to(REPO_ROOT / "solutions")
    return into


def grade_one(lab: str, submission: Path, variant: int, workdir: Path, only: list[str] | None = None) -> dict:
    """One learner: a separate `checker grade` process with a budget; returns its JSON report (or a synthesized one)."""
    root = _course_tree(lab, submission, workdir / "tree")
    out = workdir / "report.json"
    budget = LEARNER_BUDGET_S * float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))
    cmd = [sys.executable, "-m", "checker", "grade", lab, "--root", str(root), "--json", str(out),
           "--variant", str(variant)] + [a for o in only or [] for a in ("--only", o)]
    t0 = time.monotonic()
    with open(workdir / "checker.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            # SIGINT first: the inner checker stops and reaps its runs (they live in sessions of their own,
            # out of reach of a killpg here); SIGKILL only if it doesn't.
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if out.exists():
        return json.loads(out.read_text())
    tail = (workdir / "checker.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
    reason = (f"grading took over {budget:.0f} s" if time.monotonic() - t0 >= budget else tail[0])
    checks = [{"name": c.name, "passed": False, "value": None, "threshold": None, "unit": "",
               "message": reason, "hint": c.hint} for c in _checks(lab) if not only or c.name in only]
    return {"lab": lab, "passed": False, "checks": checks, "seconds": time.monotonic() - t0, "error": reason}


def _checks(lab: str):
    import importlib
    return importlib.import_module(f"checker.labs.{lab}").CHECKS


def grade_all(lab: str, submissions: Path, parallel: int, variant: int, report_dir: Path, console: Console,
              only: list[str] | None = None) -> bool:
    learners = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not learners:
        raise ValueError(f"{submissions} holds no submission folders")
    report_dir.mkdir(parents=True, exist_ok=True)
    console.print(f"grading {len(learners)} submissions of {lab}, {parallel} at a time, variant {variant}")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"checker-batch-{lab}-") as tmp:
        def job(p: Path):
            d = Path(tmp) / p.name
            d.mkdir()
            rep = grade_one(lab, p, variant, d, only)
            statuses = [_status(c) for c in rep["checks"]]
            not_run = f", {statuses.count('not_run')} NOT RUN here" if "not_run" in statuses else ""
            console.print(f"  {p.name}: {statuses.count('pass')}/{len(statuses)}{not_run} "
                          f"in {rep.get('seconds', 0):.0f} s")
            return p.name, rep
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            reports = dict(pool.map(job, learners))
    write_csv(reports, report_dir / "class.csv")
    write_junit(lab, reports, report_dir / "class.junit.xml")
    (report_dir / "class.json").write_text(json.dumps({"lab": lab, "variant": variant, "reports": reports}, indent=1))
    partial = f"; partial: only {', '.join(only)} (--only), not a grade" if only else ""
    table = Table(title=f"{lab}: {len(learners)} learners, {time.monotonic() - t0:.0f} s (variant {variant}{partial})")
    names = [c.name for c in _checks(lab) if not only or c.name in only]
    for col in ("learner", "passed", *names):
        table.add_column(col)
    for learner, rep in reports.items():
        by = {c["name"]: _status(c) for c in rep["checks"]}
        table.add_row(learner, f"{sum(v == 'pass' for v in by.values())}/{len(names)}",
                      *({"pass": "✓", "not_run": "NOT RUN"}.get(by.get(n), "✗") for n in names))
    console.print(table)
    console.print(f"class report: {report_dir}/class.csv, class.junit.xml, class.json")
    return all(r.get("passed") or r.get("status") == "not_run" for r in reports.values())  # NOT RUN: not a fail


def _status(c: dict) -> str:
    """pass, fail or not_run (a check this machine could not run: checker/README.md)."""
    return c.get("status") or ("pass" if c["passed"] else "fail")


def write_csv(reports: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["learner", "check", "passed", "value", "threshold", "unit", "message", "status"])
        for learner, rep in reports.items():
            for c in rep["checks"]:
                w.writerow([learner, c["name"], c["passed"], c["value"], c["threshold"], c["unit"], c["message"],
                            _status(c)])


def write_junit(lab: str, reports: dict, path: Path) -> None:
    suites = ET.Element("testsuites", name=f"checker {lab}")
    for learner, rep in reports.items():
        checks = rep["checks"]
        statuses = [_status(c) for c in checks]
        suite = ET.SubElement(suites, "testsuite", name=learner, tests=str(len(checks)),
                              failures=str(statuses.count("fail")), skipped=str(statuses.count("not_run")),
                              time=f"{rep.get('seconds', 0):.1f}")
        for c, status in zip(checks, statuses):
            case = ET.SubElement(suite, "testcase", classname=f"{lab}.{learner}", name=c["name"])
            if status == "not_run":  # this machine could not run it: skipped, not the learner's failure
                ET.SubElement(case, "skipped", message=f"{c['message']} — to run it: {c['hint']}"[:500])
            elif not c["passed"]:
                fail = ET.SubElement(case, "failure", message=c["message"][:500])
                fail.text = c["hint"]
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
