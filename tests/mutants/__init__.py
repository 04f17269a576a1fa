"""Mutation testing by hand: realistic one-edit slips of the reference, each with the check that must catch it.

A check is only as good as the wrong answer it fails. Each lab's mutants live in
`tests/mutants/labN.py` as `MUTANTS = [Mutant(...), ...]`; `tests/test_mutants.py` grades every one
(`checker grade labN --root TREE --only CHECK`) and demands that its named check FAILS, and `make bench`
reports the kill rate per lab (`python -m tests.mutants`).

Two tiers, both in CI: the first mutant listed in a lab's file is that lab's *sentinel* and runs in
`make test` (so the suite proves, within its 15 minutes, that every lab's grading path can fail a wrong
answer); the others are marked `exhaustive` and run in `make test-exhaustive`, which `.ci/run` runs after
`make test`: every check with mutants is proven to bite on every CI run.

Mutants marked `blind` come from someone who worked the lab from its README, starter and the checker's output
only (never checker/), then broke their own solution as learners do; make bench reports their kill rate apart.

A mutant is one edit of one reference file: `old` must occur exactly once in
`solutions/<lab folder>/<file>`, so a reference that moves on breaks the mutant loudly instead of
silently grading the unchanged reference.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from checker.seams import link_shared

ROOT = Path(__file__).resolve().parents[2]
LABS = ("lab1", "lab2", "lab3", "lab4", "lab5", "lab6", "lab7", "lab8", "lab9", "lab10")


@dataclass(frozen=True)
class Mutant:
    name: str   # short id, unique within its lab: shows in test ids and the bench table
    file: str   # path relative to solutions/<lab folder>/
    old: str    # exact text of the reference; must occur exactly once
    new: str    # the slip a learner makes
    check: str  # the check that must fail on it
    why: str    # the bug in words, one line
    args: tuple = ()  # extra `checker grade` options, e.g. ("--variant", "1") for a fix tuned to the public numbers
    # Written by someone who read only the lab's README, starter and the checker's output, never checker/ (a learner
    # working the lab, then breaking their own solution as learners do), and re-expressed on the reference here.
    blind: bool = False


def mutants(lab: str) -> list[Mutant]:
    """The lab's mutants, or [] for a lab that has none yet."""
    try:
        return list(importlib.import_module(f"{__package__}.{lab}").MUTANTS)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{lab}":
            raise
        return []


def is_sentinel(lab: str, m: Mutant) -> bool:
    """Whether `m` is the lab's first mutant: the one `make test` grades."""
    return mutants(lab)[0] is m


def unavailable(lab: str, m: Mutant) -> str | None:
    """Why `m` cannot be graded on this machine (e.g. no Slurm for lab 5), or None. A lab module may define
    `unavailable(mutant)`; a mutant whose check cannot run here would otherwise look killed."""
    fn = getattr(importlib.import_module(f"{__package__}.{lab}"), "unavailable", None)
    return fn(m) if fn else None


def lab_folder(lab: str) -> str:
    from checker import seams
    return seams.SEAMS[lab].folder


def learner_tree(dest: Path, lab: str, mutant: Mutant | None) -> Path:
    """A course tree under `dest` whose labs/<folder> is the reference with `mutant` applied.

    The layout is the one `checker grade --root` grades: labs/ (the learner's lab, the course's own
    shared core linked in) and solutions/ (the reference the checker compares against)."""
    from checker import seams

    folder = lab_folder(lab)
    for part in ("labs", "solutions"):
        (dest / part).mkdir(parents=True, exist_ok=True)
        (dest / part / "__init__.py").write_text("")
        for lab_dir in (folder, *seams.SEAMS[lab].uses):  # and the earlier labs its runs import (lab 5: 1 and 2)
            shutil.copytree(ROOT / "solutions" / lab_dir, dest / part / lab_dir,
                            ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
    link_shared(dest / "labs", ROOT)
    if mutant is not None:
        path = dest / "labs" / folder / mutant.file
        text = path.read_text()
        count = text.count(mutant.old)
        if count != 1:
            raise ValueError(f"mutant {lab}:{mutant.name}: its `old` text occurs {count} times in "
                             f"solutions/{folder}/{mutant.file} (must be exactly once)")
        path.write_text(text.replace(mutant.old, mutant.new))
    return dest


def grade(tree: Path, lab: str, check: str, timeout: float = 600, extra=()) -> tuple[int, dict]:
    """(exit status, the report's row for `check`) of `checker grade LAB --root TREE --only CHECK`."""
    out = tree / "report.json"
    r = subprocess.run([sys.executable, "-m", "checker", "grade", lab, "--root", str(tree), "--only", check,
                        "--json", str(out), *extra], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ})
    if not out.exists():
        raise RuntimeError(f"no report (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    rows = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    return r.returncode, rows[check]


def main() -> None:
    """Grade every mutant of the given labs (all by default); print each verdict and the kill rate per lab."""
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(prog="python -m tests.mutants")
    ap.add_argument("labs", nargs="*", help="labs to grade (default: every lab with mutants)")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()
    labs = args.labs or [lab for lab in LABS if mutants(lab)]
    summary = {}
    for lab in labs:
        killed, rows = 0, []
        for m in mutants(lab):
            why = unavailable(lab, m)
            if why:
                print(f"{lab} {m.name:28s} {m.check:24s} NOT RUN ({why})", flush=True)
                rows.append((m.name, m.check, "not run"))
                continue
            with tempfile.TemporaryDirectory() as tmp:
                _, row = grade(learner_tree(Path(tmp), lab, m), lab, m.check, extra=m.args)
            killed += not row["passed"]
            rows.append((m.name, m.check, "killed" if not row["passed"] else "SURVIVED"))
            print(f"{lab} {m.name:28s} {m.check:24s} {rows[-1][2]}", flush=True)
        blind = {m.name for m in mutants(lab) if m.blind}
        summary[lab] = {"mutants": len(rows), "killed": killed, "survived": [r[0] for r in rows if r[2] == "SURVIVED"],
                        "not_run": [r[0] for r in rows if r[2] == "not run"],
                        "blind": len(blind), "blind_killed": sum(r[2] == "killed" for r in rows if r[0] in blind)}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))


