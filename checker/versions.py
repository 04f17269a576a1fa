"""The torch releases the course supports (pyproject.toml's requirement; labs/common/compat.py holds every
difference between them), and what a grade says when its runs use a torch outside them, or one CI does not
grade on. A GPU node's image often brings its own torch, and a learner must not read a missing or renamed torch
API as their own mistake. Torch-free: the checker's own process never imports torch."""
from __future__ import annotations

import re
from pathlib import Path

from labs.common import compat

# what a renamed or missing API looks like in a run's error
API_DRIFT = re.compile(r"(AttributeError|ImportError|ModuleNotFoundError|TypeError).*(torch|unexpected keyword)",
                       re.S)


def torch_requirement(root: Path) -> str:
    """The torch requirement in the course at `root`'s pyproject.toml ('>=2.10,<2.16'; '' where there is none)."""
    path = root / "pyproject.toml"
    m = re.search(r'"torch\s*([<>=!~][^";]*)"', path.read_text(errors="replace")) if path.exists() else None
    return m.group(1).replace(" ", "") if m else ""


def skew(run_version: str, spec: str) -> str | None:
    """One line saying the runs' torch is outside `spec`, or inside it but not the release CI grades on; None
    when it is that release (or either is unknown)."""
    if not run_version or not spec:
        return None
    if not compat.in_range(run_version, spec):
        return (f"these runs use torch {run_version}, outside the course's supported range torch{spec}: another "
                f"release can lack or rename what the labs call: install one in range (`make setup` installs "
                f"{compat.TESTED}; GPU nodes: README, 'CPU and GPU')")
    if compat.version_tuple(run_version) == compat.version_tuple(compat.TESTED):
        return None
    return (f"these runs use torch {run_version}: in the supported range torch{spec}, but CI grades on "
            f"{compat.TESTED}; if the error names a torch API your code calls as the lab says, the course's "
            "labs/common/compat.py misses a difference between releases: report it with `checker doctor`'s output")


def annotate(results, run_version: str, spec: str) -> None:
    """A failed check whose error looks like API drift says so first, when the runs' torch is not CI's."""
    note = skew(run_version, spec)
    if note is None:
        return
    for r in results:
        if not r.passed and not r.not_run and API_DRIFT.search(f"{r.message}\n{r.details}"):
            r.hint = f"{note}. {r.hint}" if r.hint else note
