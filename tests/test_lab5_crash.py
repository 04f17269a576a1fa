"""Lab 5's jobs run the learner's lab 1 and lab 2 code (train.py imports them). When a job's ranks raise (a
`TODO(labN)` left in an earlier lab, or any error), every check that reads that job names the exception, its
file:line and its lab, before any symptom it causes (an early end, a missing CSV row, no curve to draw).
The made-up logs below are what srun puts in a job's Slurm log when lab 1's seed_everything is the starter's;
the end-to-end grade of such a tree, on a real Slurm, is CI's second tier."""
import shutil

import pytest

from checker.labs.lab5 import checks
from checker.report import CheckResult
from conftest import ROOT, load_json, need_slurm, run_checker

TODO_MSG = ("TODO(lab1): After it returns, every random stream a run, or a library it calls, can draw from is a "
            "function of seed alone. (hints: checker hint lab1 seeding.seed_everything)")

# What the Slurm log of a job whose ranks stopped at lab 1's TODO holds: both ranks' tracebacks (torch prefixes
# them with [rankN]:), then torchrun's own ChildFailedError summary, then srun's line.
CRASHED_LOG = f"""\
=== run 1 of job {{job}} on vm: 1 node(s) x 2 ranks, out=/tmp/runs/{{job}}, 2026-12-07T07:30:00Z
[rank1]: Traceback (most recent call last):
[rank1]:   File "<frozen runpy>", line 198, in _run_module_as_main
[rank1]:   File "/tmp/tree/labs/lab5_scheduler/train.py", line 113, in <module>
[rank1]:     main()
[rank1]:   File "/tmp/tree/labs/lab5_scheduler/train.py", line 52, in main
[rank1]:     seed_everything(args.seed)
[rank1]:   File "/tmp/tree/labs/lab1_baseline/seeding.py", line 13, in seed_everything
[rank1]:     raise NotImplementedError("TODO(lab1): After it returns, every random stream a run, or a library it "
[rank1]: NotImplementedError: {TODO_MSG}
Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
labs.lab5_scheduler.train FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_07:30:04
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 1234)
  error_file: <N/A>
============================================================
srun: error: vm: task 0: Exited with exit code 1
=== training exited with 1 at 07:30:05
"""

# The warning, handled as it should be: torchrun's SignalException is expected, never a crash.
WARNED_LOG = """\
=== preemption warning (USR1) at 15:10:50: asking the ranks to checkpoint and stop (...)
Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py", line 870
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 84, \
in _terminate_process_handler
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 15
srun: error: vm: task 0: Exited with exit code 1
preemption signal: checkpoint at step 44 saved; exiting for the requeue
"""


def _runs(tmp_path, logs: dict) -> object:
    runs = tmp_path / "runs"
    runs.mkdir()
    for job, text in logs.items():
        (runs / f"slurm-{job}.log").write_text(text.replace("{job}", job))
    return runs


def _check(name):
    return next(c for c in checks.CHECKS if c.name == name)


class _Run:
    def __init__(self, err=None, result=None):
        self._err, self.result = err, result or {}

    def error(self):
        return self._err


def test_a_lab1_todo_in_the_log_is_the_cause_with_its_file_line_and_lab(tmp_path):
    runs = _runs(tmp_path, {"376": CRASHED_LOG})
    why, trace = checks.job_crash(runs, "376")
    assert "TODO of lab 1" in why and "labs/lab1_baseline/seeding.py:13, in seed_everything" in why, why
    assert "NotImplementedError: TODO(lab1)" in why and "checker grade lab1" in why, why
    assert "ChildFailedError" not in why and trace.splitlines()[0].endswith("Traceback (most recent call last):")
    assert trace.splitlines()[-1].endswith(TODO_MSG)


def test_torchruns_signal_exception_on_the_warning_is_not_a_crash(tmp_path):
    assert checks.job_crash(_runs(tmp_path, {"5": WARNED_LOG}), "5") is None
    assert checks.job_crash(tmp_path, "6") is None  # no log at all


def test_an_error_that_is_no_todo_is_named_with_where_it_was_raised(tmp_path):
    log = CRASHED_LOG.replace(f"NotImplementedError: {TODO_MSG}", "KeyError: 'world_size'")
    why, _ = checks.job_crash(_runs(tmp_path, {"7": log}), "7")
    assert why.startswith("job 7's ranks raised KeyError: 'world_size'") and "seeding.py:13" in why, why


def test_every_check_the_crashed_jobs_feed_reports_the_crash_first(tmp_path):
    """The grade of the finding: the preempted job and the sweep's two jobs all stopped at lab 1's TODO."""
    runs = _runs(tmp_path, {j: CRASHED_LOG for j in ("376", "377", "378")})
    failed = [{"JobId": j, "JobState": "FAILED", "SubmitTime": "2026-12-07T07:30:00",
               "StartTime": "2026-12-07T07:30:00", "EndTime": "2026-12-07T07:30:05"} for j in ("376", "377", "378")]
    pre = checks.preempt_resume(_check("preempt_resume"), _Run(), 3, "376", "", runs, None, failed, [],
                                ["the job ended before its run 1 reached 8 steps"])
    (runs / "metrics.csv").write_text(",".join(["job_id"]) + "\n")
    met = checks.metrics_complete(_check("metrics_complete"), _Run(), runs / "metrics.csv", ["376", "377", "378"],
                                  runs, failed, _Run(result={"array": "377"}), "377")
    cur = checks.scaling_curve(_check("scaling_curve"), _Run(),
                               _Run(err={"type": "ValueError", "message": "a scaling curve needs completed jobs"}),
                               ["376", "377", "378"], runs, failed, ("377", 1))
    for r in (pre, met, cur):
        assert isinstance(r, CheckResult) and not r.passed
        assert "TODO of lab 1" in r.message and "seeding.py:13" in r.message, (r.name, r.message)
        assert "reached 8 steps" not in r.message and "no row" not in r.message and "ValueError" not in r.message
        assert "lab 1 and lab 2 code" in r.hint and "train.sbatch" not in r.hint, r.hint
        assert r.cause == "todo" and "NotImplementedError" in r.details


@pytest.mark.exhaustive  # ~2-3 min of real Slurm jobs
@pytest.mark.timeout(420)
def test_a_lab5_tree_whose_lab1_is_the_starter_names_lab1s_todo_in_every_job_check(tmp_path, lab_tree):
    need_slurm()
    root = lab_tree("lab5_scheduler")  # lab 5 finished, with labs 1 and 2 finished ...
    shutil.copy(ROOT / "labs/lab1_baseline/seeding.py", root / "labs/lab1_baseline/seeding.py")  # ... but lab 1's seed
    out = tmp_path / "out"
    out.mkdir()
    r = run_checker("grade", "lab5", "--root", root, "--json", out / "r.json", env={"TMPDIR": str(out)}, timeout=400)
    assert r.returncode == 1, r.stdout + r.stderr
    checks_ = {c["name"]: c for c in load_json(out / "r.json")["checks"]}
    for name in ("preempt_resume", "metrics_complete", "scaling_curve"):
        msg = checks_[name]["message"]
        assert "TODO of lab 1" in msg and "labs/lab1_baseline/seeding.py:" in msg, (name, msg)
    assert checks_["batch_script_valid"]["passed"] and checks_["k8s_manifests_valid"]["passed"]
