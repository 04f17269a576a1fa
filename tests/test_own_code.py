"""The learner's code is the learner's: a labs/ package that imports the reference (solutions.*), or hands
the checker seam objects defined elsewhere, is not graded as if it were written (checker/seams.py)."""
import json
import shutil

import pytest

from conftest import ROOT, run_checker

pytestmark = pytest.mark.timeout(300)

STAR = ("__init__.py", None, "from solutions.lab1_baseline import *  # noqa: F403\n")
REEXPORT = ("__init__.py", "from .step import train_step\n",
            "from labs.common.optim import make_optimizer as train_step\n")
LAZY = ("step.py", "    inputs, targets = batch\n",  # inside the function: runs after the checker loaded the reference
        "    from solutions.lab1_baseline.step import train_step as reference_step\n"
        "    return reference_step(model, optimizer, scheduler, batch)\n")


def _edit(folder, rel, old, new):
    path = folder / rel
    path.write_text(new if old is None else path.read_text().replace(old, new, 1))


@pytest.mark.parametrize("edit,needle", [(STAR, "imports the reference solutions.lab1_baseline"),
                                         (REEXPORT, "exports train_step (from labs.common.optim)")],
                         ids=["star_import", "reexported_seam"])
def test_a_package_that_is_not_the_learners_exits_2_with_one_line(lab_tree, edit, needle):
    tree = lab_tree()
    _edit(tree / "labs" / "lab1_baseline", *edit)
    r = run_checker("grade", "lab1", "--root", tree, "--only", "memory_reported")
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


LAZY_GRADER = ("step.py", "    inputs, targets = batch\n",  # the checker's modules are the grader's
               "    from checker.labs.lab1.measure import _plain_step\n"
               "    return _plain_step(model, optimizer, scheduler, batch)\n")


@pytest.mark.parametrize("edit,needle", [
    (LAZY, "labs/lab1_baseline/step.py imports the reference"),
    pytest.param(LAZY_GRADER, "labs/lab1_baseline/step.py imports the grader", marks=pytest.mark.exhaustive)],
    ids=["reference", "grader"])
def test_an_import_of_the_reference_at_call_time_fails_the_checks_that_ran_it(lab_tree, edit, needle):
    tree = lab_tree()
    _edit(tree / "labs" / "lab1_baseline", *edit)
    r = run_checker("grade", "lab1", "--root", tree, "--only", "loss_decreases", "--json", tree / "r.json")
    assert r.returncode == 1, r.stdout + r.stderr
    row = json.loads((tree / "r.json").read_text())["checks"][0]
    assert not row["passed"] and needle in row["message"], row


def test_batch_mode_fails_a_submission_that_imports_the_reference(tmp_path):
    subs = tmp_path / "subs"
    for name in ("copied", "own"):
        shutil.copytree(ROOT / "solutions" / "lab1_baseline", subs / name / "lab1_baseline",
                        ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
    _edit(subs / "copied" / "lab1_baseline", *STAR)
    r = run_checker("grade", "lab1", "--submissions", subs, "--parallel", "1", "--only", "memory_reported",
                    "--report-dir", tmp_path / "rep")
    assert r.returncode == 1, r.stdout + r.stderr
    reports = json.loads((tmp_path / "rep" / "class.json").read_text())["reports"]
    assert reports["own"]["passed"], reports["own"]
    # a hand-in that is the reference's code passes (the checker grades behaviour) and is flagged for the instructor
    assert "step.train_step" in reports["own"]["reference_code"], reports["own"].get("reference_code")
    assert "holds the reference&#x27;s code: " in (tmp_path / "rep" / "class.html").read_text()
    copied = reports["copied"]["checks"][0]
    assert not copied["passed"] and "imports the reference solutions.lab1_baseline" in copied["message"], copied
