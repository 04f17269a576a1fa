"""Lab 8: the formulas the checker grades bytes against, and a grade interrupted mid-run leaving nothing behind
(no network namespace, no veth, no process). The reference passing and the starter failing are in
tests/test_grades.py; the mutants (mesh transposed, restart that re-initialises, staging not awaited) in
tests/mutants/lab8.py, graded by tests/test_mutants.py."""
import os
import signal
import subprocess
import sys
import time

import pytest

from checker.labs import lab8, lab8_eval
from conftest import ROOT, processes_with


def test_formulas_at_two_by_two():
    b = 1000
    assert lab8_eval.formula("ddp", b) == pytest.approx(3 * b)    # one all-reduce, ring crosses twice
    assert lab8_eval.formula("fsdp", b) == pytest.approx(4.5 * b)  # all-gather + gloo's reduce-scatter (all-reduce)
    assert lab8_eval.formula("hsdp", b) == pytest.approx(2 * b)   # the shard's all-reduce, 2 groups
    # HSDP's cross-node bytes do not grow with ranks per node; FSDP's do
    assert lab8_eval.formula("hsdp", b, g=2, n=8) == lab8_eval.formula("hsdp", b, g=2, n=2)
    assert lab8_eval.formula("fsdp", b, g=2, n=8) > lab8_eval.formula("fsdp", b, g=2, n=2)


def test_without_a_real_link_the_bytes_check_is_not_run_and_says_how_to_run_it():
    row = lab8_eval.hsdp_internode_bytes(lab8.CHECKS[2], {}, {"link": None, "why_no_link": "not root"})
    assert row.not_run and not row.passed and "not root" in row.message
    assert "sudo" in row.hint and "checker grade lab8" in row.hint


def _our_namespaces(pid: int) -> list[str]:
    from solutions.lab4_debugging import slowlink
    tag = slowlink._tag(pid)[:-3]  # PREFIX + the owner's pid: what this checker's link is named after
    return [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
            if n.startswith(tag)]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_ctrl_c_during_the_two_node_run_leaves_no_namespace_and_no_process(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "checker", "grade", "lab8", "--solutions", "--only",
                          "multinode_launch"], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not list(tmp_path.glob("checker-lab8-*/nodes.log")):
            time.sleep(0.2)
        assert list(tmp_path.glob("checker-lab8-*/nodes.log")), "the two-node run never started"
        time.sleep(2.0)  # the torchrun agents are up
        assert _our_namespaces(p.pid), "no namespace of this grade while its nodes run"
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert _our_namespaces(p.pid) == []
    assert processes_with(str(tmp_path)) == []
