"""ruff, with the rules and the 120-column limit pyproject.toml sets, finds nothing in the tree."""
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed: `make setup` (pyproject's dev extra) installs it"
    r = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (f"ruff check: {r.stdout[-4000:]}{r.stderr[-2000:]}\n"
                               "`ruff check --fix .` mends the [*] ones; `ruff check --statistics .` counts by rule")
