# GENERATED from solutions/lab5_scheduler/__init__.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Lab 5: training under a scheduler. The seam: what `checker grade lab5` calls (see README.md).

train.sbatch (the batch script) -> train.py (preemption.py, restart.py) -> sweep.py -> jobmetrics.py -> report.py;
k8s/ holds the same job for Kubernetes. The names below load on first use (PEP 562): each module is
also a command (`python -m labs.lab5_scheduler.jobmetrics`), and importing it from the package first
would make runpy warn.
"""
import importlib

SEAM = {"PreemptionFlag": "preemption", "resume": "restart", "submit_sweep": "sweep", "parse_jobcomp": "jobmetrics",
        "collect": "jobmetrics", "write_csv": "jobmetrics", "scaling_table": "report", "write_report": "report"}
__all__ = list(SEAM)


def __getattr__(name: str):
    if name in SEAM:
        return getattr(importlib.import_module(f"{__name__}.{SEAM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
