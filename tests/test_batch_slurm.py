"""A class graded on Slurm: the array script, the collector's reading of what Slurm did to each task (fake squeue
and jobcomp outputs), a task's answer to Slurm's signals, and, on the local Slurm, the same verdicts as the
local batch for six learners with one task requeued mid-grade, and a cancelled array's partial report."""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from test_hostile import FORGE

from checker import batch_slurm, sandbox, slurm, slurm_task
from conftest import ROOT, need_slurm, no_leftovers, processes_with, run_checker

NO_SANDBOX = ["--no-sandbox"] if sandbox.why_not() else []
ONLY = ["--only", "reproducible", "--only", "memory_reported"]


def _learner(subs, name, source="solutions", edit=None):
    d = subs / name / "lab1_baseline"
    shutil.copytree(ROOT / source / "lab1_baseline", d, ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
    if edit:
        rel, old, new = edit
        text = (d / rel).read_text()
        assert old in text
        (d / rel).write_text(text.replace(old, new))


HANG = ("seeding.py", "    random.seed(seed)\n", "    import time\n    time.sleep(10**6)\n")
HOSTILE = ("step.py", "    inputs, targets = batch\n", textwrap.indent(FORGE, "    ") + "    inputs, targets = batch\n")


def _manifest(tmp_path, groups, array="41"):
    m = {"lab": "lab1", "variant": 3, "only": ["reproducible", "memory_reported"], "no_sandbox": True,
         "device": "cpu", "budget": 60.0, "no_hints": False, "submissions": str(tmp_path / "subs"),
         "learners": sorted(n for g in groups for n in g), "groups": groups, "gpus_per_learner": 0, "time_min": 3,
         "job_name": "checker-grade-lab1-abc123", "digest": {}, "array": array}
    (tmp_path / "slurm" / "learners").mkdir(parents=True)
    return m, tmp_path / "slurm"


def test_the_array_script_asks_slurm_for_what_one_learner_needs(tmp_path):
    m, d = _manifest(tmp_path, [["a", "b"], ["c"]])
    text = batch_slurm.array_script(m, d, cpus=2, partition="gpu", gpus=2, throttle=4)
    for line in ("#SBATCH --array=0-1%4", "#SBATCH --cpus-per-task=2", "#SBATCH --gres=gpu:2", "#SBATCH --requeue",
                 "#SBATCH --partition=gpu", "#SBATCH --time=3", "#SBATCH --signal=B:USR1@90",
                 f"-m checker.slurm_task {d / 'manifest.json'}", "#SBATCH --job-name=checker-grade-lab1-abc123"):
        assert line in text, line
    plain = batch_slurm.array_script(m, d, cpus=1, partition=None, gpus=0, throttle=None)
    assert "--gres" not in plain and "--partition" not in plain and "#SBATCH --array=0-1\n" in plain
    # a learner's budget and start, and the warning's lead, in whole minutes: 2 x (600 + 60) + 90 = 1410 s
    assert batch_slurm.time_limit_min(2, 600) == 24 and batch_slurm.time_limit_min(1, 30) == 3
    assert batch_slurm.groups_of(list("abcdefg"), 3) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    # up to 3 a task, and never fewer tasks than the partition has slots
    assert [batch_slurm.default_per_task(n, 2) for n in (1, 4, 6, 60)] == [1, 2, 3, 3]
    assert batch_slurm.default_per_task(6, 8) == 1


def test_squeue_and_jobcomp_are_read_per_task():
    text = "41_0 RUNNING\n41_1 PENDING\n41_2 COMPLETING\n41_3 COMPLETED\n"
    assert slurm.parse_array_states(text) == {0: "RUNNING", 1: "PENDING", 2: "COMPLETING"}
    recs = slurm.parse_records(
        "JobId=42 Name=checker-grade-lab1-abc123 JobState=REQUEUED ArrayJobId=41 ArrayTaskId=0\n"
        "JobId=42 Name=checker-grade-lab1-abc123 JobState=TIMEOUT ArrayJobId=41 ArrayTaskId=0\n"
        "JobId=41 Name=checker-grade-lab1-abc123 JobState=CANCELLED ArrayJobId=41 ArrayTaskId=1\n"
        "JobId=50 Name=lab5-sweep JobState=FAILED ArrayJobId=41 ArrayTaskId=2\n")  # another array, before a restart
    got = slurm.array_records("41", "checker-grade-lab1-abc123", recs)
    assert {i: r["JobState"] for i, r in got.items()} == {0: "TIMEOUT", 1: "CANCELLED"}


def test_the_collector_tells_a_timeout_a_failed_task_and_a_cancel_apart(tmp_path):
    m, d = _manifest(tmp_path, [["ada", "bo"], ["cy"], ["di", "ed"]])
    ok = {"lab": "lab1", "passed": True, "seconds": 3, "checks": [{"name": "reproducible", "passed": True,
                                                                   "status": "pass", "cause": ""}]}
    slurm_task.write_json(slurm_task.report_path(d, "ada"), ok)
    for name in ("bo", "cy"):  # each task's learner in progress when it ended
        slurm_task.write_json(slurm_task.marker_path(d, name), {"array": "41", "task": 0})
    slurm_task.write_json(slurm_task.marker_path(d, "di"), {"array": "40", "task": 2})  # an earlier array's
    records = {0: {"JobState": "TIMEOUT"}, 1: {"JobState": "FAILED"}, 2: {"JobState": "CANCELLED"}}
    got = batch_slurm.collect(m, d, records, rerun="checker grade lab1 ... --rerun-missing")
    first = {n: r["checks"][0] for n, r in got.items()}
    assert got["ada"] == ok
    assert first["bo"]["cause"] == "hang" and "time limit (3 min)" in first["bo"]["message"]
    assert first["cy"]["cause"] == "error" and "ended FAILED" in first["cy"]["message"]
    for n in ("di", "ed"):  # cancelled: not the learners' failure, and the report says how to grade them
        assert (first[n]["status"], first[n]["cause"]) == ("not_run", "missing"), first[n]
        assert "cancelled" in first[n]["message"] and first[n]["hint"].endswith("--rerun-missing")
    assert all(len(r["checks"]) == 2 for n, r in got.items() if n != "ada")  # every check of --only, failed
    assert all("incomplete" in r for n, r in got.items() if n != "ada")  # what --rerun-missing grades again
    counts = batch_slurm.progress(m, d, {0: "RUNNING", 2: "PENDING"})
    assert counts == {"done": 1, "running": 1, "pending": 2, "failed": 1}, counts


def test_slurm_options_need_slurm_and_a_class():
    r = run_checker("grade", "lab1", "--submissions", ROOT / "labs", "--partition", "gpu")
    assert r.returncode == 2 and "--partition go(es) with --slurm" in r.stderr
    r = run_checker("grade", "lab1", "--slurm")
    assert r.returncode == 2 and "--slurm grades a class" in r.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_task_stopped_by_slurm_writes_nothing_and_one_warned_of_its_time_limit_fails_the_learner(tmp_path):
    """SIGTERM (a requeue, a cancel) leaves the learner to be graded again; SIGUSR1 (the time limit is near)
    makes the learner's failed rows. Either way the learner's grade is stopped with its runs."""
    subs = tmp_path / "subs"
    _learner(subs, "ed", edit=HANG)
    m, d = _manifest(tmp_path, [["ed"]])
    m["no_sandbox"], m["digest"], m["budget"] = bool(NO_SANDBOX), sandbox.course_digest(), 300.0
    slurm_task.write_json(d / "manifest.json", m)
    tmp = _tmpdir(tmp_path)
    for sig, code in ((signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGUSR1, 0)):
        proc = subprocess.Popen([sys.executable, "-m", "checker.slurm_task", str(d / "manifest.json"), "0"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "TMPDIR": tmp})
        deadline = time.monotonic() + 30
        while len(processes_with(tmp)) < 3 and time.monotonic() < deadline:  # ed's grade and its runs have started
            time.sleep(0.2)
        time.sleep(2)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == code, out
        assert no_leftovers(tmp) == []
        if sig == signal.SIGTERM:
            assert not slurm_task.report_path(d, "ed").exists() and slurm_task.marker_path(d, "ed").exists(), out
    rep = json.loads(slurm_task.report_path(d, "ed").read_text())
    assert rep["checks"][0]["cause"] == "hang" and "reached its time limit (3 min)" in rep["checks"][0]["message"]
    assert "incomplete" in rep and not slurm_task.marker_path(d, "ed").exists()


def _tmpdir(tmp_path) -> str:
    """Every temporary folder of the grades under tmp_path (TMPDIR), so a leftover process is found by it."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return str(tmp_path / "tmp")


def _class(tmp_path, subs, name, *extra, timeout=600):
    r = run_checker("grade", "lab1", "--submissions", subs, "--report-dir", tmp_path / name, "--variant", "7",
                    *ONLY, *NO_SANDBOX, *extra, env={"CHECKER_BUDGET_SCALE": "0.4", "TMPDIR": _tmpdir(tmp_path)},
                    timeout=timeout)
    return r, {(row["learner"], row["check"]): (row["passed"], row["status"], row["cause"])
               for row in csv.DictReader(open(tmp_path / name / "class.csv"))}


def _six(subs):
    _learner(subs, "ada")
    _learner(subs, "bo")
    _learner(subs, "cy", source="labs")  # the pristine starter
    _learner(subs, "di")
    _learner(subs, "ed", edit=HANG)
    _learner(subs, "fo", edit=HOSTILE)


def _jobs_named(prefix: str) -> list[str]:
    r = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, timeout=20)
    return [line for line in r.stdout.splitlines() if f" {prefix}" in line]


@pytest.mark.exhaustive
@pytest.mark.timeout(900)
def test_slurm_gives_the_local_verdicts_with_a_task_requeued_mid_grade(tmp_path):
    need_slurm()
    subs = tmp_path / "subs"
    _six(subs)
    r, local = _class(tmp_path, subs, "local", "--parallel", "2")
    assert r.returncode == 1, r.stdout + r.stderr
    # the same class on Slurm, one learner a task; bo's task is requeued (as a node failure or preemption would)
    # while bo is being graded: graded again from the start, not failed
    proc = subprocess.Popen([sys.executable, "-m", "checker", "grade", "lab1", "--submissions", str(subs), "--slurm",
                             "--report-dir", str(tmp_path / "slurm"), "--variant", "7", *ONLY, *NO_SANDBOX,
                             "--learners-per-task", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "CHECKER_BUDGET_SCALE": "0.4", "TMPDIR": _tmpdir(tmp_path)})
    try:
        marker = tmp_path / "slurm" / "slurm" / "learners" / "bo.grading"
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)
        job = json.loads(marker.read_text())["job"]
        assert slurm.requeue(job) == ""
        out, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
    rows = {(row["learner"], row["check"]): (row["passed"], row["status"], row["cause"])
            for row in csv.DictReader(open(tmp_path / "slurm" / "class.csv"))}
    assert proc.returncode == 1, out
    assert rows == local, out  # every learner, every check: the local batch's verdicts
    assert local[("ada", "reproducible")][0] == "True" and local[("cy", "reproducible")][2] == "todo"
    assert local[("ed", "reproducible")][2] == "hang" and local[("fo", "reproducible")][0] == "False"
    m = json.loads((tmp_path / "slurm" / "slurm" / "manifest.json").read_text())
    log = (tmp_path / "slurm" / "slurm" / "logs" / f"task-{m['array']}_{m['groups'].index(['bo'])}.log").read_text()
    assert "bo: stopped by SIGTERM" in log and "bo: 2/2 in" in log, log  # graded twice: stopped, then in full
    assert re.search(r"[1-9] running", out) and "6 done" in out and "not graded" not in out
    assert _jobs_named(m["job_name"]) == []
    assert no_leftovers(_tmpdir(tmp_path)) == []


@pytest.mark.exhaustive
@pytest.mark.timeout(900)
def test_a_cancelled_array_leaves_a_partial_report_and_rerun_missing_completes_it(tmp_path):
    need_slurm()
    subs = tmp_path / "subs"
    for name in ("ada", "bo", "cy", "di"):
        _learner(subs, name)
    proc = subprocess.Popen([sys.executable, "-m", "checker", "grade", "lab1", "--submissions", str(subs), "--slurm",
                             "--report-dir", str(tmp_path / "rep"), "--variant", "7", "--only", "memory_reported",
                             *NO_SANDBOX, "--learners-per-task", "1", "--parallel", "1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": _tmpdir(tmp_path)})
    try:
        first = tmp_path / "rep" / "slurm" / "learners" / "ada.json"
        deadline = time.monotonic() + 300
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        m = json.loads((tmp_path / "rep" / "slurm" / "manifest.json").read_text())
        slurm.cancel([m["array"]])  # the instructor's scancel of the whole array
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, out
    rows = {row["learner"]: row for row in csv.DictReader(open(tmp_path / "rep" / "class.csv"))}
    assert rows["ada"]["status"] == "pass"
    gone = sorted(n for n, row in rows.items() if row["cause"] == "missing")
    assert gone and "ada" not in gone and all(rows[n]["status"] == "not_run" for n in gone), rows
    assert f"not graded: {', '.join(gone)}" in out and "--rerun-missing" in out
    r = run_checker("grade", "lab1", "--submissions", subs, "--slurm", "--report-dir", tmp_path / "rep",
                    "--rerun-missing", *NO_SANDBOX, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"grading {len(gone)} of 4 submissions" in r.stdout  # only the missing ones
    rows = list(csv.DictReader(open(tmp_path / "rep" / "class.csv")))
    assert [(row["learner"], row["status"]) for row in rows] == [(n, "pass") for n in ("ada", "bo", "cy", "di")]
    assert _jobs_named(m["job_name"]) == [] and no_leftovers(_tmpdir(tmp_path)) == []
