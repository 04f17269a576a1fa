"""Instructor mode: a folder of six submissions (right, unfinished, broken, hanging, subtly wrong)
graded two at a time into CSV + JUnit; one learner's hang never stops the batch."""
import csv
import json
import shutil
import time
from xml.etree import ElementTree as ET

import pytest

from checker import sandbox
from conftest import ROOT, processes_with, run_checker

# --submissions refuses to grade without the sandbox; a machine without bubblewrap grades these unsandboxed.
NO_SANDBOX = ["--no-sandbox"] if sandbox.why_not() else []

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _learner(subs, name, source="solutions", edits=()):
    d = subs / name / "lab1_baseline"
    shutil.copytree(ROOT / source / "lab1_baseline", d, ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
    for rel, old, new in edits:
        text = (d / rel).read_text()
        assert old in text
        (d / rel).write_text(text.replace(old, new))


@pytest.mark.exhaustive  # make test grades a batch of two (below); CI, this one too
def test_batch_of_six(tmp_path):
    subs = tmp_path / "hand-ins"
    _learner(subs, "ada")
    _learner(subs, "bo")
    _learner(subs, "cy", source="labs")  # the pristine starter
    _learner(subs, "di", edits=[("step.py", "def train_step(", "def train_step(:")])
    _learner(subs, "ed", edits=[("seeding.py", "    random.seed(seed)\n", "    import time\n    time.sleep(10**6)\n")])
    _learner(subs, "fa", edits=[("seeding.py", "    torch.manual_seed(seed)\n", "    torch.manual_seed(0)\n")])
    t0 = time.monotonic()
    r = run_checker("grade", "lab1", "--submissions", subs, "--parallel", "2", "--report-dir", tmp_path / "rep",
                    "--only", "reproducible", "--only", "memory_reported", *NO_SANDBOX,
                    env={"CHECKER_BUDGET_SCALE": "0.4"}, timeout=380)
    wall = time.monotonic() - t0
    assert r.returncode == 1, r.stdout  # not everyone passed
    rows = list(csv.DictReader(open(tmp_path / "rep" / "class.csv")))
    got = {(row["learner"], row["check"]): row for row in rows}
    assert len(rows) == 12
    passed = {k: v["passed"] == "True" for k, v in got.items()}
    assert passed[("ada", "reproducible")] and passed[("bo", "memory_reported")]
    assert not passed[("cy", "reproducible")] and "TODO(lab1)" in got[("cy", "reproducible")]["message"]
    assert not passed[("di", "memory_reported")] and "SyntaxError" in got[("di", "memory_reported")]["message"]
    stuck = got[("ed", "reproducible")]["message"]  # a sleep in learner code: the watchdog names the line at 10 s
    assert not passed[("ed", "reproducible")] and "seeding.py" in stuck and "without returning" in stuck, stuck
    assert got[("ed", "reproducible")]["cause"] == "hang" and "seeding.py" in got[("ed", "reproducible")]["frames"]
    assert got[("cy", "reproducible")]["cause"] == "todo" and got[("fa", "reproducible")]["cause"] == ""
    assert passed[("ed", "memory_reported")]  # the hang cost ed one check, not the batch
    assert not passed[("fa", "reproducible")] and passed[("fa", "memory_reported")]
    suites = ET.parse(tmp_path / "rep" / "class.junit.xml").getroot().findall("testsuite")
    assert sorted(s.get("name") for s in suites) == ["ada", "bo", "cy", "di", "ed", "fa"]
    assert {s.get("name"): int(s.get("failures")) for s in suites}["cy"] == 2
    # 6 learners, 2 at a time: well inside the sum of their budgets (600 s x 0.4 each) / 2
    assert wall < 6 * 600 * 0.4 / 2
    assert processes_with("checker-batch-lab1") == [] and processes_with(str(subs)) == []


@pytest.mark.exhaustive  # a whole batch of two learners (~30 s): CI's second tier
def test_a_symlink_to_its_parent_folder_does_not_stop_the_batch(tmp_path):
    subs = tmp_path / "hand-ins"
    _learner(subs, "ada")
    _learner(subs, "bo")
    (subs / "bo" / "lab1_baseline" / "up").symlink_to("..")  # copytree following links copied forever
    # bo opened two tiers of one task in a class graded without hints (checker/hints.py keeps it in bo's tree)
    (subs / "bo" / "lab1_baseline" / ".hints-opened.json").write_text(
        '{"seeding.seed_everything": {"tier": 2, "at": ["2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"]}}')
    # ed's meter never returns: the watchdog ends the run at 10 s, and the class report says where (-v prints it)
    _learner(subs, "ed", edits=[("meters.py", '    return {"params": params,', '    while True:\n        pass\n'
                                                                             '    return {"params": params,')])
    r = run_checker("grade", "lab1", "--submissions", subs, "--parallel", "2", "--report-dir", tmp_path / "rep",
                    "--only", "memory_reported", "--no-hints", "-v", *NO_SANDBOX, timeout=380)
    rows = list(csv.DictReader(open(tmp_path / "rep" / "class.csv")))
    assert {(row["learner"], row["passed"]) for row in rows} == {("ada", "True"), ("bo", "True"), ("ed", "False")}, \
        r.stdout
    assert {row["learner"]: row["hints_opened"] for row in rows} == {"ada": "", "bo": "seeding.seed_everything 2/3",
                                                                       "ed": ""}
    assert "bo: 1/1 in" in r.stdout and "hints opened (hints were off): seeding.seed_everything 2/3" in r.stdout
    assert r.returncode == 1  # ed
    ed = json.loads((tmp_path / "rep" / "class.json").read_text())["reports"]["ed"]["checks"][0]
    assert ed["cause"] == "hang" and ed["frames"][0].startswith("labs/lab1_baseline/meters.py:"), ed
    assert ed["frames"][0] in r.stdout and "hung: memory_reported" in r.stdout  # -v: where, in the batch's output
    assert "held a grading slot" in r.stdout
    page = (tmp_path / "rep" / "class.html").read_text()
    assert "⚑ seeding.seed_everything 2/3" in page and "<b>hung</b>" in page
    assert f"<code>{ed['frames'][0]}</code>" in page
    assert "<svg" in page and "memory_reported" in page and "http" not in page.replace("http-equiv", "")
    assert processes_with("checker-batch-lab1") == []
