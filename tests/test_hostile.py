"""Learner code that hangs, crashes, lies or floods: the checker must give a clear result, in its
budget, and leave no process behind. Each test is a row of the table in checker/README.md."""
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, load_json, processes_with, run_checker

pytestmark = pytest.mark.timeout(240)
FAST = {"CHECKER_BUDGET_SCALE": "0.3"}  # hangs are cut at 30% of the normal budgets


def _edit(tree, lab_folder, rel, old, new):
    p = tree / "labs" / lab_folder / rel
    assert old in p.read_text(), (rel, old)
    p.write_text(p.read_text().replace(old, new))


def _grade(tree, lab, *only, env=None):
    args = ["grade", lab, "--root", tree, "--json", tree / "r.json", "-v"]
    for o in only:
        args += ["--only", o]
    r = run_checker(*args, env=env)
    assert processes_with(str(tree)) == [], "a run of this tree outlived the checker"
    return r, {c["name"]: c for c in load_json(tree / "r.json")["checks"]}


def test_hang_in_a_collective_is_cut_by_the_budget_with_stacks(lab_tree):
    tree = lab_tree("lab2_ddp")  # rank 1 never joins the all-reduce rank 0 waits in
    _edit(tree, "lab2_ddp", "naive.py", "            if p.grad is not None:\n                dist.all_reduce(p.grad)",
          "            if p.grad is not None and dist.get_rank() == 0:\n                dist.all_reduce(p.grad)")
    t0 = time.monotonic()
    r, checks = _grade(tree, "lab2", "grad_equivalence", env={"CHECKER_BUDGET_SCALE": "0.2"})  # 18 s, not 90
    assert r.returncode == 1 and time.monotonic() - t0 < 90
    assert "hung" in checks["grad_equivalence"]["message"]
    assert "all_reduce" in r.stdout  # -v shows where each rank was stuck


def test_crash_on_one_rank_only_is_reported_not_waited_out(lab_tree):
    tree = lab_tree("lab2_ddp")
    _edit(tree, "lab2_ddp", "naive.py", "        self.module = module\n        self.world_size",
          "        if dist.get_rank() == 1:\n            raise RuntimeError('rank 1 is broken')\n"
          "        self.module = module\n        self.world_size")
    r, checks = _grade(tree, "lab2", "grad_equivalence", env=FAST)
    assert r.returncode == 1
    msg = checks["grad_equivalence"]["message"]
    assert "rank 1 is broken" in msg or "died" in msg or "hung" in msg, msg


def test_exit_0_in_the_middle_is_a_failure(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "step.py", "    inputs, targets = batch\n",
          "    import os\n    os._exit(0)\n    inputs, targets = batch\n")
    r, checks = _grade(tree, "lab1", "loss_decreases")
    assert r.returncode == 1 and "exit status 0, no result written" in checks["loss_decreases"]["message"]


FORGE = textwrap.dedent('''
    import json, os, sys
    print("reproducible  PASS  100 identical steps")            # fake metrics on stdout
    out = sys.argv[sys.argv.index("--out") + 1]
    fake = {"losses": ["0x1p+0"] * 100, "digest": "same", "val_loss": 0.0, "val_loss_init": 5.5,
            "entropy_rate": 1.7, "uniform_entropy": 5.5, "start": 0, "seed": 1}
    open(out + ".rank0", "w").write(json.dumps(fake))         # a fake result where the checker looks
    os._exit(0)
''')


def test_fake_metrics_and_a_forged_result_file_are_not_believed(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "step.py", "    inputs, targets = batch\n",
          textwrap.indent(FORGE, "    ") + "    inputs, targets = batch\n")
    r, checks = _grade(tree, "lab1", "loss_decreases")
    assert r.returncode == 1
    assert "not written by the checker's worker" in checks["loss_decreases"]["message"]


def test_a_corrupt_checkpoint_fails_resume_with_a_clear_error(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "state.py", "    ckpt.atomic_save(state, path)\n",
          "    open(path, 'wb').write(b'not a checkpoint')\n")
    r, checks = _grade(tree, "lab1", "resume_exact")
    assert r.returncode == 1
    assert "state.py" in checks["resume_exact"]["message"]  # names the learner's line that failed


def test_flooding_stdout_is_stopped(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "step.py", "    inputs, targets = batch\n",
          "    print('x' * 2_000_000)\n    inputs, targets = batch\n")
    r, checks = _grade(tree, "lab1", "loss_decreases")
    assert r.returncode == 1 and "printed more than 20 MB" in checks["loss_decreases"]["message"]
    assert len(r.stdout) < 200_000  # the flood did not reach the learner's terminal


def test_two_grades_at_once_do_not_collide(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "checker", "grade", "lab1", "--solutions", "--only",
                               "memory_reported", "--json", tmp_path / f"{i}.json"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(2)]
    for p in procs:
        p.communicate(timeout=200)
    assert [p.returncode for p in procs] == [0, 0]
    assert all(load_json(tmp_path / f"{i}.json")["passed"] for i in range(2))
