"""The torch release the course is graded on (pyproject.toml's pin), and what a grade says when its runs
use another. A GPU node's image often brings its own torch; an older one lacks names the labs call
(torch 2.11 has no `dist.reduce_scatter_single`: seen on an H200), and the learner would read an
AttributeError as their own mistake. Torch-free: the checker's own process never imports torch."""
from __future__ import annotations

import re
from pathlib import Path

# what a renamed or missing API looks like in a run's error
API_DRIFT = re.compile(r"(AttributeError|ImportError|ModuleNotFoundError|TypeError).*(torch|unexpected keyword)",
                       re.S)


def torch_pin(root: Path) -> str:
    """The release in the course at `root`'s pyproject.toml, `torch==X` ('' where there is no pin)."""
    path = root / "pyproject.toml"
    m = re.search(r'"torch==([^"]+)"', path.read_text(errors="replace")) if path.exists() else None
    return m.group(1) if m else ""


def skew(run_version: str, pin: str) -> str | None:
    """One line saying the runs' torch is not the pinned one, or None when it is (or either is unknown)."""
    if not run_version or not pin or run_version.split("+")[0] == pin:
        return None
    return (f"these runs use torch {run_version}; the course is graded on {pin}, and another release can lack "
            f"or rename what the labs call: install {pin} (`make setup`; GPU nodes: README, 'CPU and GPU')")


def annotate(results, run_version: str, pin: str) -> None:
    """A failed check whose error looks like API drift says so first, when the runs' torch is not the pin."""
    note = skew(run_version, pin)
    if note is None:
        return
    for r in results:
        if not r.passed and not r.not_run and API_DRIFT.search(f"{r.message}\n{r.details}"):
            r.hint = f"{note}. {r.hint}" if r.hint else note
