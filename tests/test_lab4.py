"""Lab 4's machinery, fast: starters that keep the fault, the diagnosis rules, the launch-args guard,
the rank spawner. (End-to-end grades: tests/test_grades.py and tests/test_lab4_grade.py.)"""
import subprocess
import sys
import time

import pytest

from checker import starters
from checker.labs import lab4, lab4_eval
from conftest import ROOT, processes_with


def test_a_starter_block_keeps_the_faulty_code_uncommented():
    src = ("def f(n, world):\n"
           "    # BEGIN SOLUTION\n"
           "    return n - n % world\n"
           "    # STARTER\n"
           "    # # every sample once\n"
           "    # return n\n"
           "    #\n"
           "    # END SOLUTION\n")
    assert starters.strip_solutions(src, "lab4", "f.py") == ("def f(n, world):\n"
                                                            "    # every sample once\n"
                                                            "    return n\n"
                                                            "\n")


def test_a_starter_line_left_uncommented_is_an_error():
    with pytest.raises(ValueError, match="commented out"):
        starters.strip_solutions("# BEGIN SOLUTION\nx = 1\n# STARTER\ny = 2\n# END SOLUTION\n", "lab4", "f.py")


def test_generated_lab4_starter_is_the_faulty_job_not_todos():
    files = {p.name: t for p, t in starters.generate().items() if p.parent.name == "lab4_debugging"}
    assert "find and fix what breaks" in files["incident4.py"] and "NotImplementedError" not in files["incident4.py"]
    assert "return list(range(rank, n, world))" in files["incident4.py"]
    assert "n % world" not in files["incident4.py"].split("def shard_indices")[1]


LOG = """[rank=0] launch environment: RANK=0 WORLD_SIZE=2 SLURM_NTASKS=4
[job 1] torch.distributed.DistNetworkError: ... port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: \
address already in use
rank times after step 12: inside train_step s r0=0.62 r1=0.37 | outside s r0=0.04 r1=0.35
step 3 loss 5.4673 34 ms 2 all-reduces
"""


@pytest.mark.parametrize("evidence,found", [
    ("rank times after step 8: inside train_step s r0=0.10 r1=0.21 | outside s r0=0.01 r1=0.50", True),  # other numbers
    ("name: EADDRINUSE, message: address already in use", True),       # part of a line, prefix ignored
    ("[job 0] code: -98, name: EADDRINUSE", True),                       # another job's prefix
    ("EADDRINUSE", False),                                               # too short to be a line
    ("rank 1 was slower than rank 0 every step", False),                 # not in the log
])
def test_evidence_occurs_compares_lines_without_numbers(evidence, found):
    assert lab4_eval.occurs(evidence, LOG) is found


def _diagnose(entry, n=3, log=LOG):
    check = next(c for c in lab4.CHECKS if c.name == f"diagnosed_incident{n}")
    return lab4_eval.diagnosed(check, n, {n: log}, entry if isinstance(entry, str) else {f"incident{n}": entry})


@pytest.mark.parametrize("entry,needle", [
    ("diagnosis.toml is not valid TOML: ...", "not valid TOML"),
    ({}, "no cause given"),
    ({"cause": "gremlins", "evidence": "x"}, "not in the README's list"),
    ({"cause": "slow_link", "evidence": "rank times after step 12: inside"}, "does not explain incident 3"),
    ({"cause": "straggler", "evidence": ""}, "no evidence line"),
    ({"cause": "straggler", "evidence": "the dashboard rank was slow"}, "not in the checker's log"),
    ({"cause": "straggler", "evidence": "step 3 loss 5.4673 34 ms 2 all-reduces"}, "does not show the cause"),
])
def test_a_diagnosis_fails_for_a_reason_the_learner_can_act_on(entry, needle):
    r = _diagnose(entry)
    assert not r.passed and needle in r.message and r.hint


def test_the_right_cause_and_a_line_of_the_log_pass():
    r = _diagnose({"cause": "straggler", "evidence": "rank times after step 4: inside train_step s r0=0.2 r1=0.1"})
    assert r.passed, r.message


def test_read_diagnosis_reports_a_broken_file(tmp_path):
    assert "not found" in lab4_eval.read_diagnosis(tmp_path / "diagnosis.toml")
    (tmp_path / "diagnosis.toml").write_text('[incident1]\ncause = "unterminated\n')
    assert "not valid TOML" in lab4_eval.read_diagnosis(tmp_path / "diagnosis.toml")
    assert lab4_eval.read_diagnosis(ROOT / "solutions" / "lab4_debugging" / "diagnosis.toml")["incident7"]["cause"] \
        == lab4_eval.CAUSES[7]


class _Run:
    def __init__(self, result):
        self.results = [result]
        self.result = result


@pytest.mark.parametrize("result,ok", [
    ({"launch_args": ["--standalone", "--nproc-per-node=2"]}, True),
    ({"launch_args": ["--standalone", "-m", "evil"]}, False),               # may not choose what runs
    ({"launch_args": "--standalone"}, False),                               # a string, not a list
    ({"launch_args": None, "launch_args_error": {"type": "NotImplementedError", "message": "x"}}, False),
])
def test_launch_args_must_be_torchrun_options_only(result, ok):
    got = lab4_eval.checked_launch(_Run(result))
    assert isinstance(got, list) is ok, got


@pytest.mark.timeout(30)
def test_spawn_starts_ranks_with_their_env_and_stops_peers_of_a_failed_rank(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "checker.spawn", "--nproc", "3", "--", sys.executable, "-c",
                         # one write per rank: print(a, b, c) writes its pieces separately and ranks share the pipe
                         "import os, sys; e = os.environ; "
                         "sys.stdout.write(f\"{e['RANK']} {e['WORLD_SIZE']} {e['MASTER_PORT']}\\n\")"],
                        capture_output=True, text=True, cwd=ROOT, timeout=20)
    lines = sorted(ok.stdout.split("\n")[:-1])
    assert ok.returncode == 0 and [ln.split()[:2] for ln in lines] == [["0", "3"], ["1", "3"], ["2", "3"]]
    assert len({ln.split()[2] for ln in lines}) == 1  # one rendezvous port for all ranks
    marker = f"lab4-spawn-{tmp_path.name}"
    t0 = time.monotonic()
    bad = subprocess.run([sys.executable, "-m", "checker.spawn", "--nproc", "2", "--", sys.executable, "-c",
                          f"import os, sys, time; '{marker}'; "
                          "sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)"],
                         capture_output=True, text=True, cwd=ROOT, timeout=25)
    assert bad.returncode == 3 and time.monotonic() - t0 < 15  # the sleeping peer did not run its 60 s
    assert processes_with(marker) == []


def test_scenarios_move_the_fault_with_the_variant():
    sc = lab4.scenarios()
    assert sc.scenario(2, 0).job["nan_at"] != sc.scenario(2, 1).job["nan_at"]
    assert sc.scenario(6, 0).env["COURSE_IFNAME"] != sc.scenario(6, 1).env["COURSE_IFNAME"]
    n0, n1 = (sc.scenario(4, v).job["num_samples"] for v in (0, 1))
    assert n0 != n1 and n0 % 2 == n1 % 2 == 1  # an odd epoch: the strided shards differ by one


def test_the_rendezvous_port_is_free_and_out_of_the_os_s_way(monkeypatch):
    """Below the ephemeral range: a gloo socket of a run alongside can't take it between the check and
    rank 0's bind. A port already in use is never returned; with no room below, the OS picks."""
    import socket

    from checker import spawn
    low = spawn._ephemeral_low()
    with socket.socket() as held:
        held.bind(("", spawn.LOWEST_PORT))
        monkeypatch.setattr(spawn.random, "SystemRandom", lambda: type("R", (), {  # the held port comes up first
            "randrange": lambda self, a, b, it=iter([spawn.LOWEST_PORT, spawn.LOWEST_PORT + 1]): next(it)})())  # noqa: B008
        assert spawn.free_port() == spawn.LOWEST_PORT + 1
    monkeypatch.undo()
    ports = {spawn.free_port() for _ in range(20)}
    assert all(spawn.LOWEST_PORT <= p < low for p in ports) and len(ports) > 1
    monkeypatch.setattr(spawn, "_ephemeral_low", lambda: spawn.LOWEST_PORT)
    assert spawn.free_port() >= 1024
