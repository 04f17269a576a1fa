"""Lab 4's machinery, fast: starters that keep the fault, the diagnosis rules, the launch-args guard,
the rank spawner. (End-to-end grades: tests/test_grades.py and tests/test_lab4_grade.py.)"""
import os
import subprocess
import sys
import time

import pytest

from checker import starters
from checker.labs.lab4 import checks, course, forensics
from checker.labs.lab4.checks import Facts
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
    assert checks.occurs(evidence, LOG) is found


def _diagnose(entry, n=3, log=LOG):
    check = next(c for c in checks.CHECKS if c.name == f"diagnosed_incident{n}")
    diagnosis = entry if isinstance(entry, str) else {f"incident{n}": entry}
    return checks.diagnosed(check, {}, Facts(logs={n: log}, diagnosis=diagnosis))


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
    assert "not found" in checks.read_diagnosis(tmp_path / "diagnosis.toml")
    (tmp_path / "diagnosis.toml").write_text('[incident1]\ncause = "unterminated\n')
    assert "not valid TOML" in checks.read_diagnosis(tmp_path / "diagnosis.toml")
    assert checks.read_diagnosis(ROOT / "solutions" / "lab4_debugging" / "diagnosis.toml")["incident7"]["cause"] \
        == checks.CAUSES[7]


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
    got = checks.checked_launch(_Run(result))
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
    sc = course.scenarios()
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


# ---------------------------------------------------------------- forensics: find_desync on flight-recorder dumps
def _entry(seq, op="all_reduce", size=(4,), dtype="Float", t=0):
    return {"collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": False, "profiling_name": f"gloo:{op}",
            "input_sizes": [list(size)], "input_dtypes": [dtype], "time_created_ns": t, "state": "scheduled"}


def _dumps(tmp_path, per_rank):
    """Write one dump per rank, as desync.dump does (a pickled dict with `entries`), named rank<R>."""
    import pickle
    paths = []
    for r, entries in enumerate(per_rank):
        p = tmp_path / f"rank{r}"
        p.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries}))
        paths.append(str(p))
    return paths


def _same(n):
    return [_entry(s) for s in range(1, n + 1)]


def _p2p(after, op, k):
    """A send or recv as NCCL records it: the collective_seq_id of the collective before it, its own p2p_seq_id."""
    return {**_entry(after, op), "is_p2p": True, "p2p_seq_id": k}


def _with_send(n, op):
    """Ranks 0 and 1 of the desync job: a send (recv) after collective 2."""
    return _same(2) + [_p2p(2, op, 1)] + [_entry(s) for s in range(3, n + 1)]


@pytest.mark.parametrize("case,want", [
    # rank 2 broadcasts where the others all-reduce: an op mismatch at 4, whoever timed out first
    ([_same(3) + [_entry(4, t=5)], _same(3) + [_entry(4, t=1)], _same(3) + [_entry(4, "broadcast", t=9)]],
     {"rank": 2, "seq": 4, "kind": "op"}),
    # rank 0 the odd one: a size mismatch at 2 that the job ran past (its last entries agree)
    ([[_entry(1), _entry(2, size=(24,)), _entry(3)], _same(3), _same(3)], {"rank": 0, "seq": 2, "kind": "size"}),
    ([_same(3), [_entry(1), _entry(2), _entry(3, dtype="Int")], _same(3)], {"rank": 1, "seq": 3, "kind": "dtype"}),
    # rank 1 never reached 5; its peers entered it (and timed out first)
    ([_same(5), _same(4), _same(5)], {"rank": 1, "seq": 5, "kind": "missing"}),
    # the ring buffer dropped different early entries on each rank: compare from what every rank still holds
    ([_same(6)[2:], _same(6)[1:5] + [_entry(6, "all_gather")], _same(6)], {"rank": 1, "seq": 6, "kind": "op"}),
    # a send between ranks 0 and 1 is no collective: rank 2 has no counterpart, and the first disagreement is at 4
    ([_with_send(4, "send 0->1"), _with_send(4, "recv 1<-0"), _same(3) + [_entry(4, dtype="Int")]],
     {"rank": 2, "seq": 4, "kind": "dtype"}),
    ([_same(4), _same(4), _same(4)], {"rank": None, "seq": None, "kind": None}),
])
def test_find_desync_names_the_odd_rank_at_the_first_disagreement(tmp_path, case, want):
    from solutions.lab4_debugging.forensics import find_desync
    assert find_desync(_dumps(tmp_path, case)) == want


def test_desync_cases_move_the_fault_and_keep_the_size_case_off_the_broadcasting_rank():
    desync = course.course_module("desync")
    cases = [[desync.case(k, v) for k in desync.KINDS] for v in range(12)]
    for kind in desync.KINDS:
        seen = {(c.rank, c.step) for row in cases for c in row if c.kind == kind}
        assert len({r for r, _ in seen}) >= 2 and len({s for _, s in seen}) >= 2, (kind, seen)
    assert all(c.rank != 0 for row in cases for c in row if c.kind == "size")  # rank 0 sends the broadcast
    assert all(c.step % 2 == 0 for row in cases for c in row if c.kind == "order")  # a step with an all_gather
    assert all(2 <= c.step < c.steps for row in cases for c in row)
    # behind's ring is smaller than the collectives before its fault (4 broadcasts, then 5 or 6 a step): it has
    # wrapped, and no position in a dump is the fault's sequence number
    assert all(c.buffer < 4 + 5 * (c.step - 1) for row in cases for c in row if c.kind == "behind")


def test_desync_ring_keeps_the_last_entries_of_both_kinds_numbered_as_nccl_does():
    desync = course.course_module("desync")
    collectives = [{**_entry(s), "record_id": s - 1} for s in range(3, 7)]  # the recorder dropped 1 and 2
    sent = [{**_p2p(2, "send 0->1", 1), "record_id": 2}, {**_p2p(5, "send 0->1", 2), "record_id": 6}]
    kept = desync.ring(collectives, sent, 5)
    assert [(e["collective_seq_id"], e["is_p2p"]) for e in kept] == [(3, False), (4, False), (5, False), (5, True),
                                                                      (6, False)]
    assert [e["record_id"] for e in kept] == [3, 4, 5, 6, 7]  # every entry counted, sends included


class _Runs(dict):
    pass


def _desync_runs(keys, answers):
    from types import SimpleNamespace
    runs = _Runs()
    for kind, key in keys.items():
        rs = [{"rank": r, "truth": key if r == key["rank"] else None} for r in range(3)]
        runs[f"desync_{kind}"] = SimpleNamespace(results=rs, result=rs[0], killed_on_cue=False, error=lambda: None)
    res = {"answers": {k: {"answer": a, "error": None} for k, a in answers.items()}}
    runs["forensics"] = SimpleNamespace(results=[res], result=res, killed_on_cue=False, error=lambda: None)
    return runs


def test_desync_found_grades_every_field_against_the_checker_s_key():
    check = next(c for c in checks.CHECKS if c.name == "desync_found")
    keys = {"extra": {"rank": 2, "seq": 11, "kind": "op"}, "behind": {"rank": 1, "seq": 32, "kind": "missing"}}
    assert forensics.desync_found(check, _desync_runs(keys, keys), Facts(desync_kinds=tuple(keys))).passed
    first_out = {**keys, "behind": {"rank": 0, "seq": 32, "kind": "missing"}}  # a peer that timed out first
    r = forensics.desync_found(check, _desync_runs(keys, first_out), Facts(desync_kinds=tuple(keys)))
    assert not r.passed and r.value == 1 and "behind case" in r.message and "wrong: rank" in r.message
    assert "r1" not in r.message  # the key is not given away


# ---------------------------------------------------------------- forensics: slow_rank on the link probe's traces
def _traces(tmp_path, slow, world=3, fast_s=0.001, slow_s=0.021, nbytes=1 << 20):
    """linkprobe.py's traces as the profiler writes them: a complete event per transfer on both of its ranks."""
    import itertools
    import json
    events = {r: [{"ph": "M", "name": "process_name"}] for r in range(world)}
    for i, j in itertools.combinations(range(world), 2):
        for src, dst in ((i, j), (j, i)) * 3:
            dur = 1e6 * (slow_s if slow in (src, dst) else fast_s)
            events[src].append({"ph": "X", "cat": "user_annotation", "dur": dur,
                                "name": f"probe send {src}->{dst} {nbytes} B"})
            events[dst].append({"ph": "X", "cat": "user_annotation", "dur": dur * 1.02,
                                "name": f"probe recv {src}->{dst} {nbytes} B"})
    paths = []
    for r, ev in events.items():
        p = tmp_path / f"trace_rank{r}.json"
        p.write_text(json.dumps({"traceEvents": ev}))
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("slow", [0, 1, 2])
def test_slow_rank_names_the_rank_in_every_slow_pair_and_its_rate(tmp_path, slow):
    from solutions.lab4_debugging.forensics import slow_rank
    got = slow_rank(_traces(tmp_path, slow))
    assert got["rank"] == slow and abs(got["gbps"] / ((1 << 20) / 0.021 / 1e9) - 1) < 0.03, got


def test_slow_rank_found_passes_within_the_band_only():
    from types import SimpleNamespace

    check = next(c for c in checks.CHECKS if c.name == "slow_rank_found")

    def runs(answer):
        res = {"answers": {}, "slow_rank": {"answer": answer, "error": None}}
        ok = SimpleNamespace(results=[{}], result={}, killed_on_cue=False, error=lambda: None)
        return {"linkprobe": ok, "forensics": SimpleNamespace(results=[res], result=res, killed_on_cue=False,
                                                             error=lambda: None)}
    assert forensics.slow_rank_found(check, runs({"rank": 2, "gbps": 0.048}), Facts(slow_link=(2, 0.05))).passed
    bits = forensics.slow_rank_found(check, runs({"rank": 2, "gbps": 0.4}), Facts(slow_link=(2, 0.05)))
    assert not bits.passed and bits.value == 8.0 and "Bytes or bits" in bits.message
    partner = forensics.slow_rank_found(check, runs({"rank": 1, "gbps": 0.05}), Facts(slow_link=(2, 0.05)))
    assert not partner.passed and "not the rank" in partner.message


@pytest.mark.timeout(60)
def test_a_hung_job_s_ranks_are_read_by_py_spy_when_it_is_installed(tmp_path):
    """run.py's Launch, past its deadline, asks py-spy for each rank's stack (the launcher itself is skipped):
    the log names the line each rank waits on. Skipped where py-spy is not installed (it is not a dependency)."""
    import shutil
    if not (shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))):
        pytest.skip("py-spy not installed (pip install py-spy)")
    from solutions.lab4_debugging.run import Launch
    marker = f"lab4-pyspy-{tmp_path.name}"
    rank = ("import sys, time\n"
            "def wait_for_peer():\n"
            f"    time.sleep(60)  # {marker}\n"
            "sys.stdout.write('started\\n'); sys.stdout.flush()\n"
            "wait_for_peer()\n")
    launcher = ("import os, subprocess, sys, time; "
                f"subprocess.Popen([sys.executable, '-c', {rank!r}], env={{**os.environ, 'RANK': '0'}}); "
                "time.sleep(60)")
    with open(tmp_path / "job.log", "w") as log:
        job = Launch([sys.executable, "-c", launcher], dict(os.environ), log)
        while not any("started" in ln for ln in job.lines):
            time.sleep(0.1)
        assert job.wait(time.monotonic()) == "hung"
    text = (tmp_path / "job.log").read_text()
    assert text.count("# py-spy dump --pid") == 1 and "(rank 0)" in text  # the rank, not the launcher
    assert "wait_for_peer" in text, text[-2000:]
    assert processes_with(marker) == []


# ---------------------------------------------------------------- forensics: find_memory_leak on memory snapshots
def test_memory_leak_found_grades_line_bytes_and_the_clean_run_without_giving_the_line_away():
    from types import SimpleNamespace

    check = next(c for c in checks.CHECKS if c.name == "memory_leak_found")
    keys = {"logits": {"file": "/course/memleak.py", "line": 74, "bytes_per_step": 524288, "steps": 8},
            "clean": {"file": "/course/memleak.py", "line": None, "bytes_per_step": 0, "steps": 8}}
    right = {"logits": {"file": "/course/memleak.py", "line": 74, "bytes_per_step": 530000}, "clean": None}

    def runs(answers):
        res = {"memory": {k: {"answer": a, "error": None} for k, a in answers.items()}}
        ok = SimpleNamespace(results=[{}], result={"keys": keys}, killed_on_cue=False, error=lambda: None)
        return {"memleak": ok, "forensics": SimpleNamespace(results=[res], result=res, killed_on_cue=False,
                                                           error=lambda: None)}

    def found(answers):
        return forensics.memory_leak_found(check, runs(answers), Facts())
    assert found(right).passed
    total = found({**right, "logits": {**right["logits"], "bytes_per_step": 8 * 524288}})
    assert not total.passed and "8.00x" in total.message
    moved = found({**right, "logits": {**right["logits"], "line": 73}})
    assert not moved.passed and "memleak.py:73" in moved.message and "74" not in moved.message
    inner = found({**right, "logits": {**right["logits"], "file": "/torch/nn/functional.py"}})
    assert not inner.passed and "not a line of memleak.py" in inner.message
    flagged = found({**right, "clean": right["logits"]})
    assert not flagged.passed and flagged.value == 1 and "clean run" in flagged.message
