"""Lab 5 without a scheduler: the batch-script rules, the jobcomp arithmetic, the scaling table, the
evaluators' verdicts on made-up logs, the rendezvous flag across real ranks, and the local-Slurm script.
(The end-to-end grade on a real Slurm is in tests/test_grades.py; no Slurm: tests/test_lab5_grade.py.)"""
import json
import subprocess
import sys

import pytest

from checker import slurm
from checker.labs.lab5 import checks
from checker.report import CheckResult
from conftest import ROOT
from solutions.lab5_scheduler import jobmetrics, report

# Two real jobcomp lines of one job, written by Slurm 22.05 here: warned and requeued once, then completed.
# The requeue leaves a PENDING line and resets SubmitTime.
REQUEUED = """\
JobId=2 UserId=root(0) GroupId=root(0) Name=lab5-train JobState=PENDING Partition=debug TimeLimit=10 \
StartTime=2026-12-02T15:10:36 EndTime=2026-12-02T15:10:53 NodeList=vm NodeCnt=1 ProcCnt=2 WorkDir=/work/main \
ReservationName= Tres=cpu=2,mem=4G,node=1,billing=2 Account= QOS= WcKey= Cluster=unknown \
SubmitTime=2026-12-02T15:10:30 EligibleTime=2026-12-02T15:10:36 DerivedExitCode=1:0 ExitCode=0:0
JobId=2 UserId=root(0) GroupId=root(0) Name=lab5-train JobState=COMPLETED Partition=debug TimeLimit=10 \
StartTime=2026-12-02T15:11:06 EndTime=2026-12-02T15:11:16 NodeList=vm NodeCnt=1 ProcCnt=2 WorkDir=/work/main \
ReservationName= Tres=cpu=2,mem=4G,node=1,billing=2 Account= QOS= WcKey= Cluster=unknown \
SubmitTime=2026-12-02T15:10:53 EligibleTime=2026-12-02T15:11:04 DerivedExitCode=1:0 ExitCode=0:0
"""


def _log(path, runs):
    """A training log: runs = [(restart, resumed_from, [(step, loss), ...]), ...]."""
    lines = []
    for restart, start, steps in runs:
        lines.append({"event": "start", "restart_count": restart, "resumed_from": start, "world_size": 2})
        lines += [{"step": s, "loss": loss, "tokens": 1024, "step_s": 0.05, "world_size": 2} for s, loss in steps]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.mark.parametrize("header,problem", [
    ("#SBATCH --open-mode=append\n#SBATCH --signal=B:USR1@90\n", "--requeue"),
    ("#SBATCH --requeue\n#SBATCH --signal=B:USR1@90\n", "--open-mode=append"),
    ("#SBATCH --requeue\n#SBATCH --open-mode=append\n", "--signal=B:USR1@N"),
    ("#SBATCH --requeue\n#SBATCH --open-mode=append\n#SBATCH --signal=USR1@90\n", "not the batch shell"),
    ("#SBATCH --requeue\n#SBATCH --open-mode=append\n#SBATCH --signal=B:USR1@10\n", "10 s of warning"),
    ("#SBATCH --open-mode=append\n#SBATCH --signal=B:USR1@90\necho hi\n#SBATCH --requeue\n", "--requeue"),
])
def test_batch_script_rules_name_what_is_missing(header, problem):
    problems = checks.script_problems("#!/bin/bash\n" + header)
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_solution_script_breaks_no_rule():
    assert checks.script_problems((ROOT / "solutions/lab5_scheduler/train.sbatch").read_text()) == []


def test_a_requeued_job_sums_its_waits_and_runs(tmp_path):
    records = jobmetrics.parse_jobcomp(REQUEUED)
    assert [r["JobState"] for r in records] == ["PENDING", "COMPLETED"] and records[0]["ReservationName"] == ""
    _log(tmp_path / "2" / "log.jsonl", [(0, 0, [(1, 4.0), (2, 3.5)]), (1, 2, [(3, 3.0)])])
    (tmp_path / "jobcomp.txt").write_text(REQUEUED)
    (row,) = jobmetrics.collect(tmp_path / "jobcomp.txt", tmp_path)
    # waits: 6 s before run 1 + 13 s before run 2; runs: 17 s + 10 s
    assert (row["state"], row["runs"], row["queue_wait_s"], row["elapsed_s"]) == ("COMPLETED", 2, 19.0, 27.0)
    assert (row["steps"], row["final_loss"], row["tokens_per_s"]) == (3, 3.0, 1024 / 0.05)
    # the checker's own reading agrees
    want = checks._expected_row("2", slurm.parse_records(REQUEUED), tmp_path)
    assert (want["queue_wait_s"], want["elapsed_s"], want["runs"]) == (19.0, 27.0, 2)


def test_a_job_waiting_for_its_requeue_is_not_reported_yet(tmp_path):
    (tmp_path / "2").mkdir()
    (tmp_path / "jobcomp.txt").write_text(REQUEUED.splitlines()[0] + "\n")
    assert jobmetrics.collect(tmp_path / "jobcomp.txt", tmp_path) == []


def test_scaling_efficiency_is_against_linear_from_the_smallest_size():
    rows = [{"job_id": "1", "world_size": "1", "state": "COMPLETED", "tokens_per_s": "1000"},
            {"job_id": "2", "world_size": "2", "state": "COMPLETED", "tokens_per_s": "1500"},
            {"job_id": "3", "world_size": "2", "state": "COMPLETED", "tokens_per_s": "1700"},
            {"job_id": "4", "world_size": "4", "state": "FAILED", "tokens_per_s": "9999"}]
    t = report.scaling_table(rows)
    assert [x["world_size"] for x in t] == [1, 2]  # the failed job is no measurement
    assert t[1]["tokens_per_s"] == 1600 and t[1]["speedup"] == 1.6 and t[1]["efficiency"] == pytest.approx(0.8)


def _preempt_verdict(tmp_path, preempted, reference, state="COMPLETED"):
    _log(tmp_path / "7" / "log.jsonl", preempted)
    _log(tmp_path / "8" / "log.jsonl", [(0, 0, reference)])
    rec = [{"JobId": "7", "JobState": state}]
    check = next(c for c in checks.CHECKS if c.name == "preempt_resume")
    return checks.preempted_job(check, "7", "", tmp_path, "8", rec, [], ["warning sent"])


def test_preempt_resume_passes_only_bit_identical_losses_over_two_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "STEPS", 4)
    ref = [(s, 4.0 - s / 10) for s in range(1, 5)]
    ok = _preempt_verdict(tmp_path, [(0, 0, ref[:2]), (1, 2, ref[2:])], ref)
    assert isinstance(ok, CheckResult) and ok.passed, ok.message
    off = _preempt_verdict(tmp_path, [(0, 0, ref[:2]), (1, 2, [(3, 3.7000001), (4, 3.6)])], ref)
    assert not off.passed and "diverge" in off.message and "step 3" in off.message
    once = _preempt_verdict(tmp_path, [(0, 0, ref)], ref)
    assert not once.passed and "1 run(s)" in once.message
    scratch = _preempt_verdict(tmp_path, [(0, 0, ref[:2]), (1, 0, ref)], ref)
    assert not scratch.passed and "from step 0" in scratch.message
    failed = _preempt_verdict(tmp_path, [(0, 0, ref)], ref, state="FAILED")
    assert not failed.passed and "ended FAILED" in failed.message


@pytest.mark.timeout(90)
def test_ranks_stop_together_when_only_one_is_signalled(tmp_path):
    """Rank 1 alone gets SIGUSR1; both ranks must see should_stop() at the same step."""
    code = (
        "import os, signal, time\n"
        "import torch, torch.distributed as dist\n"
        "from labs.common import dist as cdist\n"
        "from solutions.lab5_scheduler.preemption import PreemptionFlag\n"
        "flag = PreemptionFlag().install()\n"
        "dist.init_process_group('gloo')\n"
        "rank = dist.get_rank()\n"
        "for step in range(50):\n"
        "    if rank == 1 and step == 7:\n"
        "        os.kill(os.getpid(), signal.SIGUSR1)\n"
        "    if flag.should_stop(torch.device('cpu')):\n"
        "        break\n"
        "os.write(1, f'rank {rank} stopped at {step} received={flag.received}\\n'.encode())"
        "  # one write: no interleaving\n"
        "cdist.teardown()\n")
    r = subprocess.run([sys.executable, "-m", "checker.spawn", "--nproc=2", "--", sys.executable, "-c", code],
                       cwd=ROOT, capture_output=True, text=True, timeout=80)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("rank"))
    assert lines == ["rank 0 stopped at 7 received=None", "rank 1 stopped at 7 received=10"], r.stdout


def test_slurm_script_refuses_without_root_and_unknown_commands():
    script = ROOT / "checker/slurm_local.sh"
    r = subprocess.run(["bash", str(script), "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr
    r = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True)
    assert r.returncode == 0 and "slurmctld" in r.stdout


class _Ok:
    result: dict = {}

    def error(self):
        return None


def test_a_wait_that_counts_the_requeue_itself_as_queued_is_named_as_such(tmp_path):
    """Slurm stamps a requeued run's SubmitTime seconds after the previous run ended (~8 s here after a plain
    `scontrol requeue`): a wait taken as 'everything not running' is 8 s too long, and the message says why."""
    gap = REQUEUED.replace("SubmitTime=2026-12-02T15:10:53", "SubmitTime=2026-12-02T15:11:01")
    text = gap + gap.replace("JobId=2 ", "JobId=3 ")
    for job in ("2", "3"):
        _log(tmp_path / job / "log.jsonl", [(0, 0, [(1, 4.0), (2, 3.5)]), (1, 2, [(3, 3.0)])])
    (tmp_path / "jobcomp.txt").write_text(text)
    rows = jobmetrics.collect(tmp_path / "jobcomp.txt", tmp_path)
    assert [r["queue_wait_s"] for r in rows] == [11.0, 11.0]  # 6 s before run 1, 5 s before run 2
    for r in rows:
        r["queue_wait_s"] = 19.0  # first SubmitTime to last EndTime, less the 27 s of running
    jobmetrics.write_csv(rows, tmp_path / "metrics.csv")
    check = next(c for c in checks.CHECKS if c.name == "metrics_complete")
    got = checks.metrics_complete(check, _Ok(), tmp_path / "metrics.csv", ["2", "3"], tmp_path,
                                  slurm.parse_records(text), _Ok(), "2")
    assert not got.passed and "queue_wait_s 19.0, the checker reads 11.0" in got.message, got.message
    assert "neither queued nor running" in got.message, got.message
