"""ruff, with the rules and the 120-column limit pyproject.toml sets: nothing in the tree but the long lines
left from before the limit, and never more of those."""
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

# Lines over 120 columns (E501) still in the tree. The budget only goes down: wrap the long lines of a file
# you touch and lower it to the new count (`ruff check --select E501 --statistics .`). A change that adds a
# long line fails below.
LONG_LINES_BUDGET = 296


def _ruff(*args) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed: `make setup` (pyproject's dev extra) installs it"
    return subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", *args, "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing_but_long_lines():
    r = _ruff("--extend-ignore", "E501")
    assert r.returncode == 0, (f"ruff check: {r.stdout[-4000:]}{r.stderr[-2000:]}\n"
                               "`ruff check --fix .` mends the [*] ones; `ruff check --statistics .` counts by rule")


def test_no_more_lines_over_120_columns_than_the_budget():
    r = _ruff("--select", "E501")
    long_lines = [line for line in r.stdout.splitlines() if " E501 " in line]
    assert len(long_lines) <= LONG_LINES_BUDGET, (
        f"{len(long_lines)} lines over 120 columns, budget {LONG_LINES_BUDGET}: wrap the new ones\n"
        + "\n".join(long_lines[-20:]))
