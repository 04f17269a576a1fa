"""A grade whose runs use a torch outside the supported range, or in it but not the release CI grades on, says so
on the checks that failed the way API drift fails (checker/versions.py): a GPU image's torch must not read as the
learner's bug."""
import torch

from checker import versions
from checker.report import CheckResult
from conftest import ROOT, load_json, run_checker
from labs.common import compat

DRIFT = "AttributeError: module 'torch.distributed' has no attribute 'reduce_scatter_single' (zero2.py:134)"


def test_the_requirement_is_read_from_pyproject_and_the_torch_installed_here_is_in_it():
    spec = versions.torch_requirement(ROOT)
    assert spec == compat.SUPPORTED and compat.in_range(torch.__version__, spec)
    assert versions.torch_requirement(ROOT / "labs") == ""  # no pyproject.toml: no requirement, nothing to compare


def test_only_a_failure_that_looks_like_api_drift_gets_the_note_and_only_under_another_torch():
    def results():
        return [CheckResult("drift", False, message=DRIFT, hint="Zero2Optimizer: ..."),
                CheckResult("wrong", False, message="loss differs from DDP's by 0.3", hint="average"),
                CheckResult("fine", True, message="ok")]

    same = results()
    versions.annotate(same, f"{compat.TESTED}+cpu", compat.SUPPORTED)
    assert [r.hint for r in same] == ["Zero2Optimizer: ...", "average", ""]
    outside = results()
    versions.annotate(outside, "2.5.1+cu124", compat.SUPPORTED)
    assert outside[0].hint.startswith(f"these runs use torch 2.5.1+cu124, outside the course's supported range "
                                      f"torch{compat.SUPPORTED}")
    assert outside[0].hint.endswith("Zero2Optimizer: ...")
    assert [r.hint for r in outside[1:]] == ["average", ""]
    inside = results()  # a release in range that CI does not grade on: the course's bug, if anyone's
    versions.annotate(inside, "2.11.0+cu130", compat.SUPPORTED)
    assert "in the supported range" in inside[0].hint and "labs/common/compat.py" in inside[0].hint


def test_a_grade_outside_the_range_says_so_on_the_check_that_failed_on_torch(lab_tree, tmp_path):
    tree = lab_tree()
    (tree / "pyproject.toml").write_text('dependencies = ["torch==1.0.0"]\n')  # a course that asks for another
    step = tree / "labs" / "lab1_baseline" / "step.py"
    old = "    inputs, targets = batch\n"
    assert old in step.read_text()
    step.write_text(step.read_text().replace(old, old + "    torch.distributed.reduce_scatter_nonexistent\n", 1))
    r = run_checker("grade", "lab1", "--root", tree, "--json", tmp_path / "r.json", "--only", "step_matches_reference")
    check = load_json(tmp_path / "r.json")["checks"][0]
    assert r.returncode == 1 and "AttributeError" in check["message"], check
    assert f"these runs use torch {torch.__version__}, outside the course's supported range torch==1.0.0" in \
        check["hint"], check
