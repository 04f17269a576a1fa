"""Lab 8 on a real cluster: train.sbatch runs each node's torchrun with the learner's torchrun_args. Slurm
validates it (`sbatch --test-only`, at one node: the course's Slurm has one) and runs it end to end on one
node; the launch line it builds is torchrun_args' own."""
import socket
import subprocess
import sys
import time

import pytest

from checker import slurm
from conftest import ROOT, need_slurm

SCRIPT = ROOT / "solutions" / "lab8_multinode" / "train.sbatch"


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def _launch_line(nnodes: int, endpoint: str) -> subprocess.CompletedProcess:
    code = "import sys; from solutions.lab8_multinode.launch import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, "--nnodes", str(nnodes), "--nproc-per-node", "2",
                           "--node-rank", "0", "--endpoint", endpoint, "--run-id", "j7", "--max-restarts", "2"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_the_launch_line_is_torchrun_args_for_this_node():
    from solutions.lab8_multinode.launch import torchrun_args

    r = _launch_line(1, "localhost:29411")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == torchrun_args(1, 2, 0, f"{socket.gethostbyname('localhost')}:29411", "j7", 2,
                                             "127.0.0.1")


def test_a_loopback_rendezvous_for_several_nodes_is_refused():
    """/etc/hosts often maps a machine's own name to 127.0.1.1: no other node could reach that rendezvous."""
    r = _launch_line(2, "localhost:29411")
    assert r.returncode != 0 and "no other node can reach" in r.stderr and not r.stdout


def test_slurm_accepts_the_script():
    need_slurm()
    ok, said = slurm.test_only(SCRIPT, slurm.client_env({}), ("--nodes=1",))
    assert ok, said


@pytest.mark.slow
@pytest.mark.exhaustive  # make test grades lab 8's training end to end (tests/test_grades.py)
@pytest.mark.timeout(240)
def test_the_job_trains_on_the_course_slurm(tmp_path):
    need_slurm()
    (tmp_path / "runs" / "lab8").mkdir(parents=True)
    env = slurm.client_env({"PYTHONPATH": str(ROOT), "LAB8_PYTHON": sys.executable,
                            "LAB8_TRAIN_ARGS": "--steps 6 --device cpu"})
    r = subprocess.run(["sbatch", "--parsable", "--nodes=1", str(SCRIPT)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    try:
        left = slurm.wait_all([job], time.monotonic() + 180)
        assert not left, f"job {job} still queued or running after 180 s"
    finally:
        slurm.cancel([job])
    log = (tmp_path / "runs" / "lab8" / f"slurm-{job}.log").read_text()
    assert "world 2, nodes [[0, 1]]" in log and "step 6 loss" in log, log[-3000:]
    assert (tmp_path / "runs" / "lab8" / f"ckpt-{job}").is_dir(), "no checkpoint: a restart would start over"
