"""ruff, with the rules and the 120-column limit pyproject.toml sets: nothing in the tree, long lines included."""
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _ruff(*args) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed: `make setup` (pyproject's dev extra) installs it"
    return subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", *args, "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing():
    r = _ruff()
    assert r.returncode == 0, (f"ruff check: {r.stdout[-4000:]}{r.stderr[-2000:]}\n"
                               "`ruff check --fix .` mends the [*] ones; `ruff check --statistics .` counts by rule; "
                               "a BEGIN SOLUTION hint goes on under its first word (checker/starters.py)")
