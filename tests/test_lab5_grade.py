"""Lab 5's grade where no Slurm answers (as on a laptop without root, or macOS): every check that needs the
scheduler is NOT RUN, says how to start one, and is neither a pass nor the learner's failure. The manifests
need no scheduler and are graded all the same. `checker grade lab5` then exits 3 (no grade here), while
`--all` (`make demo`, a machine's smoke test) lists what did not run and exits 0."""
import csv
import shutil
import xml.etree.ElementTree as ET

import pytest

from checker import batch
from checker.cli import exit_status
from checker.labs.lab5 import k8s
from checker.labs.lab5.checks import CHECKS
from checker.report import CheckResult, LabReport, status_of
from conftest import ROOT, load_json, run_checker

pytestmark = pytest.mark.timeout(120)
SCHEDULER_CHECKS = [c.name for c in CHECKS if "slurm" in c.needs]


def no_slurm(tmp_path) -> dict:
    return {"SLURM_CONF": str(tmp_path / "no-such-slurm.conf"), "TMPDIR": str(tmp_path)}


def test_without_slurm_every_scheduler_check_is_not_run_with_the_way_to_start_it(tmp_path):
    r = run_checker("grade", "lab5", "--solutions", "--json", tmp_path / "r.json", env=no_slurm(tmp_path))
    assert r.returncode == 3, r.stdout + r.stderr  # nothing failed, but lab 5 could not be graded here
    rep = load_json(tmp_path / "r.json")
    assert (rep["passed"], rep["status"]) == (False, "not_run")
    checks = {c["name"]: c for c in rep["checks"]}
    assert list(checks) == [c.name for c in CHECKS] and len(SCHEDULER_CHECKS) == 4
    assert (checks["k8s_manifests_valid"]["passed"], checks["k8s_manifests_valid"]["status"]) == (True, "pass")
    for name in SCHEDULER_CHECKS:
        c = checks[name]
        assert (c["passed"], c["status"]) == (False, "not_run"), c
        assert "no Slurm configuration" in c["message"] and "make slurm-up" in c["hint"], c
    out = " ".join(r.stdout.split())  # the table wraps long cells
    assert out.count("NOT RUN") >= 4 and "FAIL" not in out, r.stdout
    assert "lab5: 1/1 checks passed; 4 NOT RUN on this machine (not failures" in out, r.stdout


def test_all_lists_what_did_not_run_and_succeeds(tmp_path, lab_tree):
    """`make demo` on a machine without Slurm: the checks that ran passed, so it succeeds and lists the rest."""
    root = lab_tree("lab5_scheduler", with_uses=False)  # a course tree holding lab 5 only: --all grades just it
    r = run_checker("grade", "--all", "--solutions", "--root", root, "--json", tmp_path / "all.json",
                    env=no_slurm(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = load_json(tmp_path / "all.json")
    assert (rep["passed"], rep["status"], [lab["lab"] for lab in rep["labs"]]) == (False, "not_run", ["lab5"])
    out = " ".join(r.stdout.split())
    assert "NOT RUN on this machine (4 checks; not failures)" in out, r.stdout
    assert f"lab5 {', '.join(SCHEDULER_CHECKS)}: not run on this machine: no Slurm" in out, r.stdout
    assert "To run them: start Slurm: `make slurm-up`" in out, r.stdout
    assert r.stdout.strip().splitlines()[-1] == ("1 lab, 1 check passed, 4 NOT RUN, 0 failed — every check that "
                                                 "ran passed; the NOT RUN ones are listed above"), r.stdout


def test_exit_status_counts_not_run_as_neither_pass_nor_fail():
    def lab(*statuses):
        checks = [CheckResult(f"c{i}", s == "pass", not_run=s == "not_run") for i, s in enumerate(statuses)]
        return LabReport("lab5", "solutions", "cpu", 2, 1.0, checks, total_checks=len(checks))

    assert [c.status for c in lab("pass", "fail", "not_run").checks] == ["pass", "fail", "not_run"]
    assert CheckResult("c", True, not_run=True).passed is False  # never counted as passed
    cases = [  # (labs, --all?) -> exit status
        ([lab("pass", "not_run")], False, 3),             # `checker grade lab5` without Slurm: no grade
        ([lab("pass", "not_run")], True, 0),              # `make demo` there: succeeds, lists the rest
        ([lab("not_run")], True, 3),                      # nothing at all could run
        ([lab("fail", "not_run")], True, 1),              # a failure beside them still fails
        ([lab("pass"), lab("fail", "not_run")], True, 1),
        ([lab("pass", "pass")], False, 0)]
    for labs, every_lab, want in cases:
        assert exit_status(labs, every_lab) == want, (labs, every_lab)
    assert [status_of(labs) for labs, _, _ in cases] == ["not_run", "not_run", "not_run", "fail", "fail", "pass"]


def test_a_manifest_without_apiversion_is_a_problem_not_a_crash(tmp_path):
    folder = tmp_path / "k8s"
    shutil.copytree(ROOT / "solutions" / "lab5_scheduler" / "k8s", folder)
    (folder / "torchrun-job.yaml").write_text("kind: Job\nmetadata: {name: train}\n")
    problems = [str(p) for p in k8s.validate_manifests(folder)]
    assert any("no apiVersion" in p for p in problems), problems


def test_batch_reports_not_run_as_skipped(tmp_path):
    checks = [{"name": "k8s_manifests_valid", "passed": True, "status": "pass", "value": 0, "threshold": 0,
               "unit": "problems", "message": "valid", "hint": ""},
              {"name": "preempt_resume", "passed": False, "status": "not_run", "value": None, "threshold": None,
               "unit": "", "message": "not run on this machine: no Slurm", "hint": "make slurm-up"},
              {"name": "metrics_complete", "passed": False, "value": 3, "threshold": 0, "unit": "cells",
               "message": "wrong", "hint": "see jobmetrics.py"}]  # a synthesized report has no status
    reports = {"ada": {"lab": "lab5", "passed": False, "checks": checks, "seconds": 1.0}}
    batch.write_csv(reports, tmp_path / "c.csv")
    rows = list(csv.DictReader(open(tmp_path / "c.csv")))
    assert [r["status"] for r in rows] == ["pass", "not_run", "fail"]
    assert rows[1]["hint"] == "make slurm-up"  # a NOT RUN row's hint: how to run it
    batch.write_junit("lab5", reports, tmp_path / "c.xml")
    suite = ET.parse(tmp_path / "c.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite}
    assert cases["preempt_resume"].find("skipped") is not None and cases["preempt_resume"].find("failure") is None
    assert "make slurm-up" in cases["preempt_resume"].find("skipped").get("message")
    assert cases["metrics_complete"].find("failure") is not None
