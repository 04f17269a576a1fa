"""checker/README.md's table of hostile inputs names a test per row: every named test exists, and
every test in tests/test_hostile.py has its row."""
import ast
import re

from conftest import ROOT


def _tests_in(path):
    tree = ast.parse((ROOT / path).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_row_names_a_real_test_and_every_hostile_test_has_a_row():
    table = (ROOT / "checker" / "README.md").read_text().split("## Hostile inputs", 1)[1]
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", table)
    assert len(named) >= 12
    for path, name in named:
        assert name in _tests_in(path), f"{path}::{name} is in the table but not in the tests"
    rows = {name for path, name in named if path == "tests/test_hostile.py"}
    assert _tests_in("tests/test_hostile.py") == rows
