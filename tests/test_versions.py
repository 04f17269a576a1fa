"""A grade whose runs use another torch than the course's pin says so on the checks that failed the way
API drift fails (checker/versions.py): a GPU image's older torch must not read as the learner's bug."""
import torch

from checker import versions
from checker.report import CheckResult
from conftest import ROOT, load_json, run_checker

DRIFT = "AttributeError: module 'torch.distributed' has no attribute 'reduce_scatter_single' (zero2.py:134)"


def test_the_pin_is_read_from_pyproject_and_is_the_torch_installed_here():
    assert versions.torch_pin(ROOT) and versions.torch_pin(ROOT) == torch.__version__.split("+")[0]
    assert versions.torch_pin(ROOT / "labs") == ""  # no pyproject.toml: no pin, nothing to compare


def test_only_a_failure_that_looks_like_api_drift_gets_the_note_and_only_under_another_torch():
    def results():
        return [CheckResult("drift", False, message=DRIFT, hint="Zero2Optimizer: ..."),
                CheckResult("wrong", False, message="loss differs from DDP's by 0.3", hint="average"),
                CheckResult("fine", True, message="ok")]

    same = results()
    versions.annotate(same, "2.13.0+cpu", "2.13.0")
    assert [r.hint for r in same] == ["Zero2Optimizer: ...", "average", ""]
    other = results()
    versions.annotate(other, "2.11.0+cu130", "2.13.0")
    assert other[0].hint.startswith("these runs use torch 2.11.0+cu130; the course is graded on 2.13.0")
    assert other[0].hint.endswith("Zero2Optimizer: ...")
    assert [r.hint for r in other[1:]] == ["average", ""]


def test_a_grade_under_another_pin_says_so_on_the_check_that_failed_on_torch(lab_tree, tmp_path):
    tree = lab_tree()
    (tree / "pyproject.toml").write_text('dependencies = ["torch==1.0.0"]\n')  # a course pinned elsewhere
    step = tree / "labs" / "lab1_baseline" / "step.py"
    old = "    inputs, targets = batch\n"
    assert old in step.read_text()
    step.write_text(step.read_text().replace(old, old + "    torch.distributed.reduce_scatter_nonexistent\n", 1))
    r = run_checker("grade", "lab1", "--root", tree, "--json", tmp_path / "r.json", "--only", "step_matches_reference")
    check = load_json(tmp_path / "r.json")["checks"][0]
    assert r.returncode == 1 and "AttributeError" in check["message"], check
    assert f"these runs use torch {torch.__version__}; the course is graded on 1.0.0" in check["hint"], check
