"""The checker's contract (README.md's "Grading yourself", checker/README.md): commands, exit codes, one clear
line, JSON schema."""
import textwrap
import uuid

import pytest

from conftest import ROOT, load_json, processes_with, run_checker

pytestmark = pytest.mark.timeout(180)


def test_list_names_every_lab1_check():
    r = run_checker("list")
    assert r.returncode == 0
    for name in ("reproducible", "resume_exact", "loss_decreases", "step_matches_reference", "throughput",
                 "throughput_meter", "memory_reported", "input_pipeline"):
        assert name in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["grade", "lab99"], "unknown lab 'lab99'"),
    (["grade"], "give one lab"),
    (["grade", "lab1", "--only", "nosuchcheck"], "no check nosuchcheck"),
    (["grade", "lab1", "--json", "/nonexistent-dir/r.json"], "cannot write the --json report"),
    (["grade", "lab2", "--nproc", "5"], "lab2 grades at world size 2; --nproc 5 is not supported"),
])
def test_bad_usage_exits_2_with_one_clear_line(args, needle):
    r = run_checker(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_json_report_follows_the_schema(tmp_path):
    out = tmp_path / "r.json"
    r = run_checker("grade", "1", "--solutions", "--only", "memory_reported", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = load_json(out)
    assert {k: type(v) for k, v in rep.items() if k != "info"} == {
        "lab": str, "target": str, "device": str, "world_size": int, "passed": bool, "seconds": float,
        "checks": list, "complete": bool, "variant": int, "sandbox": str, "status": str}  # the contract's, plus four
    assert (rep["lab"], rep["target"], rep["device"], rep["passed"], rep["status"]) == (
        "lab1", "solutions", "cpu", True, "pass")
    (check,) = rep["checks"]
    assert set(check) == {"name", "passed", "status", "value", "threshold", "unit", "message", "hint", "cause",
                          "frames"}
    assert (check["cause"], check["frames"]) == ("", [])  # a pass: nothing went wrong, nowhere
    assert check["status"] == "pass"
    assert check["name"] == "memory_reported" and check["value"] == check["threshold"] > 0
    assert not rep["complete"] and "only 1 of 8 checks ran" in r.stdout  # a partial run says so


def _break(tree, rel, old, new):
    p = tree / "labs" / "lab1_baseline" / rel
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new))


@pytest.mark.parametrize("rel,old,new,needle", [
    ("step.py", "def train_step(", "def train_step(:", "SyntaxError"),
    ("step.py", "import torch\n", "import torch\nimport no_such_package_xyz\n", "no_such_package_xyz"),
    ("__init__.py", "from .step import train_step\n", "", "does not export train_step"),
])
def test_learner_code_that_does_not_import_exits_2(lab_tree, rel, old, new, needle):
    tree = lab_tree()
    _break(tree, rel, old, new)
    r = run_checker("grade", "lab1", "--root", tree)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    if needle == "SyntaxError":
        assert "step.py" in r.stderr  # says where


HANG = textwrap.dedent('''
    import os, sys, time
    if os.fork() == 0:                      # a grandchild that escapes into its own session
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
        os._exit(0)
    time.sleep(10**6)                       # and the step itself never returns
''')


def test_code_that_hangs_fails_within_budget_and_leaves_nothing(lab_tree):
    tree = lab_tree()
    marker = f"hang-{uuid.uuid4().hex}"
    _break(tree, "step.py", '    inputs, targets = batch\n',
           textwrap.indent(HANG.format(marker=marker), "    ") + "    inputs, targets = batch\n")
    r = run_checker("grade", "lab1", "--root", tree, "--only", "loss_decreases", "-v",
                    env={"CHECKER_BUDGET_SCALE": "0.1"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "hung" in r.stdout and "train_step" in r.stdout  # the stack shows where it was stuck
    assert processes_with(marker) == []


def test_device_choices_mirror_the_one_device_module():
    """cli.py keeps its own copy so `checker list` does not import torch; it must not drift."""
    from checker import cli
    from labs.common import dist

    assert cli.DEVICE_CHOICES == dist.DEVICE_CHOICES


def test_grading_every_lab_ends_with_one_closing_line(monkeypatch, capsys):
    """`make demo` (`checker grade --all --solutions`): hundreds of lines, then the verdict as the last one."""
    from checker import cli
    from checker.report import CheckResult, LabReport, closing_line

    def lab(name, *statuses):
        checks = [CheckResult(f"c{i}", s == "pass", not_run=s == "not_run") for i, s in enumerate(statuses)]
        return LabReport(name, "solutions", "cpu", 2, 1.0, checks, total_checks=len(checks))

    assert closing_line([lab("lab1", "pass", "pass"), lab("lab5", "pass", "not_run")]) == (
        "2 labs, 3 checks passed, 1 NOT RUN, 0 failed — every check that ran passed; the NOT RUN ones are listed above")
    assert closing_line([lab("lab1", "pass"), lab("lab2", "fail", "pass"), lab("lab3", "fail")]).endswith(
        "3 labs, 2 checks passed, 0 NOT RUN, 2 failed — FAILED in lab2, lab3")
    assert closing_line([lab("lab5", "not_run")]).endswith("— nothing ran")
    graded = iter([lab("lab1", "pass"), lab("lab2", "fail")])
    monkeypatch.setattr(cli, "grade_lab", lambda *a: next(graded))
    monkeypatch.setattr(cli.seams, "lab_names", lambda: ["lab1", "lab2"])
    assert cli.main(["grade", "--all", "--solutions"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "2 labs, 1 check passed, 0 NOT RUN, 1 failed — FAILED in lab2"


def test_no_list_of_labs_is_typed_by_hand_in_the_help_or_the_slides_readme(monkeypatch):
    """A lab added to checker/seams.py (lab10 while lab9 was the last) is in `checker grade --help` at once; the
    slides' README names no range of decks that a new lab would leave behind."""
    import re

    from checker import cli, seams

    monkeypatch.setattr(seams, "lab_names", lambda: ["lab1", "lab2", "lab10"])
    helps = {name: p.format_help() for name, p in cli.build_parser()._subparsers._group_actions[0].choices.items()}
    assert "lab1 ... lab10" in " ".join(helps["grade"].split()) and "lab1 ... lab10" in helps["hint"]
    readme = (ROOT / "slides" / "README.md").read_text()
    assert not re.search(r"lab\d+\.md`? *(…|\.\.\.|to|-) *`?(slides/)?lab\d+\.md", readme), "a range of decks"
