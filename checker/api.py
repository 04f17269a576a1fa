"""What a notebook may use of the checker. Everything else in checker/ is the grader's own and may change.

    from checker import api
    api.notebook_target()              # "labs" or "solutions" (COURSE_TARGET): whose code the notebook runs
    api.pristine_tree(folder)          # lab 4: the faulty job as generated, in a private tree that imports the core
    api.slurm                          # lab 5: submit, signal, wait for jobs on the course's Slurm (checker/slurm.py)
    api.validate_manifests(folder)     # lab 5: the Kubernetes manifests against the pinned schema
    api.K8S_VERSION                    # the Kubernetes release that schema is pinned to
    api.hint_tasks(lab)                # the lab's tasks: name, contract, tiers (checker/hints.py; the notebook's
    api.open_hint(lab, task)           #   hint button opens the next tier, kept in the learner's tree)
    api.long_context_figures(target)   # lab 9: memory, bytes and per-rank work of your attention, measured on 4 ranks
    api.goodput_run(target)            # lab 8: the chaos job on your checkpoints, once: goodput measured and predicted

Grading itself is the `checker` command; a notebook runs it as a subprocess and shows its --json report
(labs.notebook.grade_table), so a notebook's grade is the terminal's grade.
"""
from __future__ import annotations

from pathlib import Path

from checker import hints, slurm
from checker.harness import REPO_ROOT
from checker.labs.lab5.k8s import K8S_VERSION, validate_manifests
from checker.seams import notebook_target

__all__ = ["K8S_VERSION", "goodput_run", "hint_tasks", "long_context_figures", "notebook_target", "open_hint",
           "pristine_tree", "slurm", "validate_manifests"]


def hint_tasks(lab: str) -> list[dict]:
    """The lab's tasks in this course tree (labs/), or RuntimeError when hints are off here."""
    why = hints.off(REPO_ROOT)
    if why:
        raise RuntimeError(why)
    return hints.tasks(REPO_ROOT, lab)


def open_hint(lab: str, task: str) -> tuple[dict, int]:
    """Open the next tier of a task, as `checker hint LAB TASK` does; returns the task and its tiers open."""
    why = hints.off(REPO_ROOT)
    if why:
        raise RuntimeError(why)
    return hints.reveal(REPO_ROOT, lab, task)


def pristine_tree(folder: Path) -> Path:
    """Lab 4's starter as generated from solutions/ (the faulty job) under `folder`; returns the tree's root."""
    from checker.labs.lab4.evidence import pristine_tree as _pristine

    return _pristine(Path(folder))


def long_context_figures(target: str, timeout_s: float = 300) -> dict:
    """Lab 9's figures for `target`'s code ("labs" or "solutions"), measured on 4 ranks by the checker's own
    instruments (checker/labs/lab9/report.py: its docstring says what each number is). RuntimeError with the ranks'
    output when they fail."""
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lab9.json"
        r = subprocess.run([sys.executable, "-m", "checker.spawn", "--nproc=4", "--", sys.executable, "-m",
                            "checker.labs.lab9.report", "--target", target, "--out", str(out)],
                           capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout_s)
        if r.returncode or not out.exists():
            raise RuntimeError(f"lab 9's measurement exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return json.loads(out.read_text())


def goodput_run(target: str, mtbf_s: float = 4.0, steps: int = 800, factor: float = 1.0,
                timeout_s: float = 180) -> dict:
    """Lab 8: goodput_chaos's job on `target`'s checkpoints and formulas, once (checker/labs/lab8/goodput_report.py
    says what it measures); RuntimeError with its output when it fails."""
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "goodput.json"
        r = subprocess.run([sys.executable, "-m", "checker.labs.lab8.goodput_report", "--target", target, "--out",
                            str(out), "--mtbf", str(mtbf_s), "--steps", str(steps), "--factor", str(factor)],
                           capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout_s)
        if r.returncode or not out.exists():
            raise RuntimeError(f"the goodput job exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return json.loads(out.read_text())
