"""The course's own lab 4 modules, loaded from solutions/lab4_debugging (never the graded tree's copy): the
conditions (scenarios.py) and the faulty jobs (desync.py, linkprobe.py, memleak.py) are the checker's. Both
sides use them: the plan to set the runs up, the worker to run the faulty jobs."""
from __future__ import annotations

import importlib.util
import sys

from checker.harness import REPO_ROOT


def course_module(name: str):
    """One of the course's own lab 4 modules (never the graded tree's copy: the faulty jobs are the checker's)."""
    path = REPO_ROOT / "solutions" / "lab4_debugging" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_lab4_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def scenarios():
    """The course's own scenarios.py (never the graded tree's copy: the conditions are the checker's)."""
    return course_module("scenarios")
