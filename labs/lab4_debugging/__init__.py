# GENERATED from solutions/lab4_debugging/__init__.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Lab 4: debugging distributed failures. The seam: what `checker grade lab4` calls (see README.md).

Each incidentN.py is one piece of the training job in job.py, as a teammate wrote it. The checker
launches the job with your pieces under each incident's conditions (scenarios.py, moved around by
hidden variants), and reads your diagnosis.toml.

The names below load on first use (PEP 562), so `python -m labs.lab4_debugging.run` starts without
importing torch: it only launches the job.
"""
import importlib

SEAM = {"join": "incident1", "skip_step": "incident2", "after_step": "incident3", "shard_indices": "incident4",
        "save_checkpoint": "incident5", "load_checkpoint": "incident5", "configure_network": "incident6",
        "launch_args": "incident7", "train_step": "incident8", "Job": "job", "run": "job",
        "find_desync": "forensics", "slow_rank": "forensics", "find_memory_leak": "forensics"}
__all__ = list(SEAM)


def __getattr__(name: str):
    if name in SEAM:
        return getattr(importlib.import_module(f"{__name__}.{SEAM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
