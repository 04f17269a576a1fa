"""Lab 4's faulty jobs (parent side): the starter as generated from solutions/ is the faulty job; the checker runs
it from a private tree, by its run.py exactly as a learner runs it, and keeps each incident's log under
runs/lab4/evidence/, reused while the faulty sources, torch and the device choice are unchanged. A diagnosis's
evidence line must occur in these logs (checks.py)."""
from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

from checker import seams
from checker.harness import REPO_ROOT, Harness
from checker.labs.lab4 import LAB
from checker.labs.lab4.course import scenarios


def pristine_tree(workdir: Path) -> Path:
    """The starter as generated from solutions/ (the faulty job), in a private tree that imports the course's core."""
    from checker.starters import generate

    root = workdir / "pristine"
    (root / "labs").mkdir(parents=True, exist_ok=True)
    (root / "labs" / "__init__.py").write_text("")
    seams.link_shared(root / "labs", REPO_ROOT)
    for path, text in generate(REPO_ROOT).items():
        rel = path.relative_to(REPO_ROOT / "labs")
        if rel.parts[0] == seams.SEAMS[LAB].folder:
            (root / "labs" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "labs" / rel).write_text(text)
    return root


def evidence_key(root: Path, variant: int) -> str:
    """Faulty logs are reused while the faulty sources, torch and the device choice are the same."""
    from importlib.metadata import version  # not `import torch`: the checker's own process never loads it

    h = hashlib.sha256(f"{variant} {version('torch')} {os.environ.get('COURSE_DEVICE', 'auto')}".encode())
    for p in sorted((root / "labs" / seams.SEAMS[LAB].folder).glob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def evidence_dir() -> Path:
    return REPO_ROOT / "runs" / "lab4" / "evidence"


def faulty_specs(h: Harness, variant: int, need: set[int]) -> tuple[dict[int, str], list[dict], Path, str]:
    """Logs of the faulty job (the pristine starter) already kept for these sources, and run specs for the rest."""
    tree = pristine_tree(h.workdir)
    key, folder = evidence_key(tree, variant), evidence_dir()
    logs = {}
    for n in need:
        log, stamp = folder / f"incident{n}.log", folder / f"incident{n}.key"
        if log.exists() and stamp.exists() and stamp.read_text() == key:
            logs[n] = log.read_text(errors="replace")
    # run.py itself from the pristine tree, as a learner runs it: PYTHONPATH puts that tree first.
    env = {"PYTHONPATH": os.pathsep.join([str(tree), str(REPO_ROOT)])}
    # run.py stops a job it thinks hung after the scenario's budget; a loaded machine stretches it as it does ours
    scale, sc = float(os.environ.get("CHECKER_BUDGET_SCALE", "1")), scenarios()
    specs = [dict(name=f"faulty{n}", task="", budget_s=120, env=env,
                  argv=[sys.executable, "-m", "labs.lab4_debugging.run", str(n), "--variant", str(variant),
                        "--budget", str(sc.scenario(n, variant).budget_s * scale),
                        "--log", str(h.workdir / f"incident{n}.faulty.log")]) for n in sorted(need - set(logs))]
    return logs, specs, folder, key


def keep_faulty_logs(h: Harness, logs: dict, specs: list[dict], folder: Path, key: str) -> None:
    for spec in specs:
        n = int(spec["name"].removeprefix("faulty"))
        path = h.workdir / f"incident{n}.faulty.log"
        logs[n] = path.read_text(errors="replace") if path.exists() else ""
        # a job run.py had to stop ("hung": a machine too loaded to start it in time) is not kept: its log may lack
        # the lines a diagnosis quotes, and kept it would fail every later grade of these sources
        if logs[n] and not re.search(r"^# outcome: .*hung", logs[n], re.M):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"incident{n}.log").write_text(logs[n])
            (folder / f"incident{n}.key").write_text(key)
