"""End to end, every lab: the reference passes every check in the time a grade may take, and the
pristine starter fails every check, each with its own hint and the TODO that is missing.
(Each lab's classic mistakes are in tests/test_labN_grade.py.)"""
import importlib

import pytest

from checker import seams
from conftest import load_json, run_checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
LABS = seams.lab_names()


def _grade(lab, out_dir, *args):
    r = run_checker("grade", lab, "--json", out_dir / "report.json", *args)
    return r, load_json(out_dir / "report.json")


@pytest.mark.parametrize("lab", LABS)
def test_solutions_pass_every_check(tmp_path, lab):
    r, rep = _grade(lab, tmp_path, "--solutions")
    assert r.returncode == 0, r.stdout
    checks = importlib.import_module(f"checker.labs.{lab}").CHECKS
    assert [c["name"] for c in rep["checks"]] == [c.name for c in checks] and rep["passed"]
    assert rep["seconds"] <= 45  # COURSE.md: a grade of one lab takes <= 45 s on 2 cores


@pytest.mark.parametrize("lab", LABS)
def test_pristine_starter_fails_every_check_with_its_hint(tmp_path, lab):
    r, rep = _grade(lab, tmp_path)
    assert r.returncode == 1
    by_name = {c["name"]: c for c in rep["checks"]}
    for check in importlib.import_module(f"checker.labs.{lab}").CHECKS:
        got = by_name[check.name]
        assert not got["passed"]
        assert got["hint"] == check.hint and f"labs/{seams.SEAMS[lab].folder}/" in got["hint"]
        assert f"not written yet: TODO({lab})" in got["message"], got
