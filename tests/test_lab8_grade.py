"""Lab 8: the formulas the checker grades bytes against, and a grade interrupted mid-run leaving nothing behind
(no network namespace, no veth, no process). The reference passing and the starter failing are in
tests/test_grades.py; the mutants (mesh transposed, restart that re-initialises, staging not awaited, an interval
without the save cost, a goodput without the restart, a resume of the newest folder) in tests/mutants/lab8.py, graded
by tests/test_mutants.py. The goodput check's hidden cases, failure schedule and reading of a torn resume are below."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from checker.labs.lab8 import checks
from conftest import ROOT, processes_with


def test_formulas_at_two_by_two():
    b = 1000
    assert checks.formula("ddp", b) == pytest.approx(3 * b)    # one all-reduce, ring crosses twice
    assert checks.formula("fsdp", b) == pytest.approx(4.5 * b)  # all-gather + gloo's reduce-scatter (all-reduce)
    assert checks.formula("hsdp", b) == pytest.approx(2 * b)   # the shard's all-reduce, 2 groups
    # HSDP's cross-node bytes do not grow with ranks per node; FSDP's do
    assert checks.formula("hsdp", b, g=2, n=8) == checks.formula("hsdp", b, g=2, n=2)
    assert checks.formula("fsdp", b, g=2, n=8) > checks.formula("fsdp", b, g=2, n=2)


def test_without_a_real_link_the_bytes_check_is_not_run_and_says_how_to_run_it():
    row = checks.hsdp_internode_bytes(checks.CHECKS[2], {}, {"link": None, "why_no_link": "not root"})
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


# ---------------------------------------------------------------- goodput
def _shares(case):
    step_s, save_s, restart_s, mtbf_s, k = case
    period = k * step_s + save_s
    return save_s / period, restart_s / mtbf_s, period / 2 / mtbf_s


@pytest.mark.parametrize("variant", range(12))
def test_hidden_goodput_cases_tell_each_cost_apart_and_accept_every_first_order_form(variant):
    import math

    from checker.labs.lab8 import chaos as ch

    def off(g, want):  # what goodput_formulas compares: the waste, relative
        return abs((1 - g) / (1 - want) - 1)

    for case in ch.unit_cases(variant):
        step_s, save_s, restart_s, mtbf_s, k = case
        want, tau = ch.goodput(*case), k * step_s
        # a formula that leaves one cost out misses by more than the tolerance...
        for name, wrong in (("no restart", ch.goodput(step_s, save_s, 0.0, mtbf_s, k)),
                            ("no save stall", ch.goodput(step_s, 0.0, restart_s, mtbf_s, k)),
                            ("no lost work", tau / (tau + save_s) * (1 - restart_s / mtbf_s))):
            assert off(wrong, want) > 1.5 * checks.WASTE_TOL, (name, case)
        # ...while the other first-order forms, and Daly's exact expectation, meet it
        additive = 1 - save_s / (tau + save_s) - (restart_s + (tau + save_s) / 2) / mtbf_s
        young = 1 - save_s / tau - (restart_s + tau / 2) / mtbf_s
        exact = tau / (mtbf_s * math.exp(restart_s / mtbf_s) * (math.exp((tau + save_s) / mtbf_s) - 1))
        for g in (additive, young, exact):
            assert off(g, want) <= checks.WASTE_TOL / 1.5, case


def test_young_daly_is_where_the_checkers_goodput_peaks():
    from checker.labs.lab8 import chaos as ch
    step_s, save_s, restart_s, mtbf_s = 1.0, 30.0, 300.0, 86_400.0
    best = max(range(1, 20_000), key=lambda k: ch.goodput(step_s, save_s, restart_s, mtbf_s, k))
    assert best * step_s == pytest.approx(ch.young_daly(save_s, mtbf_s), rel=0.02)  # 2277 s; first order


def test_failure_gaps_are_stratified_exponential_with_the_stated_mean():
    import statistics

    from checker.labs.lab8 import chaos as ch
    gaps = ch.schedule(0, 4 * ch.BLOCK)
    for b in range(4):  # each block: the same 8 quantile midpoints, mean MTBF exactly, in the seed's order
        block = gaps[b * ch.BLOCK:(b + 1) * ch.BLOCK]
        assert statistics.mean(block) == pytest.approx(ch.MTBF_S)
        assert sorted(block) == pytest.approx(sorted(gaps[:ch.BLOCK]))
    assert statistics.median(gaps[:ch.BLOCK]) < ch.MTBF_S  # skewed as an exponential is: most gaps short
    assert ch.schedule(0, 16) == gaps[:16] and ch.schedule(1, 16) != gaps[:16]


def test_each_failures_time_adds_up_to_the_wall_time_not_spent_on_kept_steps():
    """measure() on a hand-made run: 0.1 s steps; attempt 0 runs steps 1-3, saves after 2 (0.2 s), is killed at 0.75;
    attempt 1 boots (first step at 1.0: a 0.25 s restart) and runs steps 3-4 again from the save."""
    from checker.labs.lab8 import chaos as ch
    steps = [(0, 1, 0.0), (0, 2, 0.1), (0, 3, 0.4), (1, 3, 1.0), (1, 4, 1.1)]
    ev = [{"a": a, "ev": "step", "step": s, "t0": t, "t1": t + 0.1} for a, s, t in steps]
    ev.insert(2, {"a": 0, "ev": "saved", "step": 2, "t0": 0.2, "t1": 0.4})
    m = ch.measure({"events": ev, "kills": [{"a": 0, "t": 0.75}]})
    assert (m["kept"], m["failures"], m["saves"]) == (4, 1, 1)
    assert m["wall_s"] == pytest.approx(1.2) and m["useful_s"] == pytest.approx(0.4)
    lost = m["per_failure_s"]
    assert lost["restart"] == pytest.approx(0.25) and lost["save_stalls"] == pytest.approx(0.2)
    assert lost["redone"] == pytest.approx(0.35)  # step 3's first run and the wait for the kill: 0.4 to 0.75
    assert sum(lost.values()) * m["failures"] == pytest.approx(m["wall_s"] - m["useful_s"])


def test_a_torn_save_is_named_and_a_resume_from_it_fails_the_check():
    """_resume_problems on a hand-made log: attempt 1 saved step 4, was killed inside (held) its save of step 8;
    attempt 2 resumed from 8 (the torn one) or crashed reading it."""
    ev = [{"a": 0, "ev": "ready", "resumed": 0}, {"a": 1, "ev": "ready", "resumed": 0},
          {"a": 1, "ev": "saved", "step": 4}, {"a": 1, "ev": "saving", "step": 8}]
    kills = [{"a": 0, "held": False}, {"a": 1, "held": True}]
    ok = checks._resume_problems({"events": ev + [{"a": 2, "ev": "ready", "resumed": 4}], "kills": kills})
    assert ok == []
    torn = checks._resume_problems({"events": ev + [{"a": 2, "ev": "ready", "resumed": 8}], "kills": kills})
    assert "resumed from step 8" in torn[0] and "step 8 was killed half-written" in torn[0]
    crash = checks._resume_problems({"events": ev + [{"a": 2, "ev": "error", "type": "CheckpointException",
                                                        "message": ".metadata"}], "kills": kills})
    assert "attempt 2 failed" in crash[0] and "newest complete checkpoint was step 4" in crash[0]
    # a kill that was not held may land after the commit: the save it interrupted counts as complete
    kills[1]["held"] = False
    late = checks._resume_problems({"events": ev + [{"a": 2, "ev": "ready", "resumed": 8}], "kills": kills})
    assert late == []
    # the first attempt finds no checkpoint: it must start at 0, and a resume that raises there is named too
    first = checks._resume_problems({"events": [{"a": 0, "ev": "error", "type": "FileNotFoundError",
                                                    "message": "latest"}], "kills": []})
    assert "attempt 0 failed: FileNotFoundError" in first[0]


@pytest.mark.slow
@pytest.mark.exhaustive  # 34-44 s loaded: CI's second tier, beside lab 8's whole grade (test_grades)
@pytest.mark.timeout(180)
def test_ctrl_c_during_the_chaos_run_leaves_no_process(tmp_path):
    """The chaos run forks an attempt per failure: interrupted with attempts alive, none of them outlives the grade."""
    p = subprocess.Popen([sys.executable, "-m", "checker", "grade", "lab8", "--solutions", "--only",
                          "goodput_chaos"], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        log = None
        while time.monotonic() < deadline:
            found = list(tmp_path.glob("checker-lab8-*/goodput/chaos.jsonl"))
            # two failures in (an attempt killed in its restart logs nothing): a later attempt is running
            if found and re.search(r'"a": ([2-9]|\d\d),', found[0].read_text()):
                log = found[0]
                break
            time.sleep(0.2)
        assert log is not None, "the chaos run never got past its second failure"
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    time.sleep(0.5)  # PR_SET_PDEATHSIG's SIGKILL is delivered at once; its reaping by init may lag
    assert processes_with(str(tmp_path)) == []


def test_every_first_order_interval_passes_and_one_without_the_2_fails_at_every_hidden_variant():
    """sqrt(2 C MTBF) - C, the exact optimum of the README's waste table, derived from the README, must pass; a
    formula missing the 2 must not."""
    import math

    from checker.labs.lab8 import chaos as ch
    for variant in range(6):
        for _, save_s, _, mtbf_s, _ in ch.unit_cases(variant):
            young = ch.young_daly(save_s, mtbf_s)
            assert abs((young - save_s) / young - 1) <= checks.INTERVAL_TOL
            assert abs(math.sqrt(save_s * mtbf_s) / young - 1) > checks.INTERVAL_TOL
