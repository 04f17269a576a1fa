"""The checker's fork server (checker/forkserver.py): a forked run computes what a fresh process
computes, is the checker's own child in its own session like a Popen'd run, dies whole when killed,
and the harness falls back to Popen when the server can't serve."""
import os

import pytest

from checker import forkserver
from checker.harness import Harness

pytestmark = pytest.mark.timeout(180)


def _harness(tmp_path, name, lab, monkeypatch, fork=True, **kw):
    monkeypatch.setenv("CHECKER_FORKSERVER", "1" if fork else "0")
    workdir = tmp_path / name
    workdir.mkdir()
    h = Harness(workdir, lab, "solutions", "cpu", **kw)
    assert (h.forkserver is not None) == fork, h.forkserver_off
    return h


def _in(workdir) -> dict[int, tuple[int, int, str]]:
    """pid -> (parent, session, command line) of every process working in `workdir`."""
    found = {}
    for e in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{e}/cwd") == str(workdir):
                stat = open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()
                found[int(e)] = (int(stat[1]), int(stat[3]), open(f"/proc/{e}/cmdline").read())
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_forked_ranks_compute_what_fresh_processes_compute(tmp_path, monkeypatch):
    """Two ranks of lab 2's seeded DDP training with dropout, forked and Popen'd: bit-identical losses."""
    spec = dict(name="train", task="train", nproc=2, budget_s=90, args=dict(seed=3, steps=4))
    got = {}
    for fork in (True, False):
        h = _harness(tmp_path, f"fork{fork}", "lab2", monkeypatch, fork=fork)
        try:
            h.run("probe", "probe", {}, budget_s=60)  # a grade's first run does not wait for the server
            run = h.run(**spec)
        finally:
            h.close()
        assert run.error() is None and run.returncode == 0, run.log_tail()
        assert run.forked == fork, h.forkserver and h.forkserver.why_not
        got[fork] = [(r["losses"], r["digest"]) for r in run.results]
    assert len(got[True]) == 2 and len(got[True][0][0]) == 4
    assert got[True] == got[False]


def test_a_forked_run_is_our_child_in_its_own_session_and_dies_whole(tmp_path, monkeypatch):
    seen = []
    h = _harness(tmp_path, "w", "lab1", monkeypatch, on_progress=lambda _: seen.append(_in(h.workdir)))
    server = h.forkserver.proc.pid
    try:
        h.run("probe", "probe", {}, budget_s=60)  # a grade's first run does not wait for the server
        seen.clear()
        # killed by the harness (SIGKILL to its session) once it has saved, as a preemption is
        run = h.run("resume_1", "train", dict(seed=1, steps=400, save_at=3, ckpt=str(h.workdir / "c.pt")),
                    budget_s=60, kill_on="saved")
        assert run.forked and run.killed_on_cue and run.result.get("losses"), run.log_tail()
        runs = {pid: ps for snap in seen for pid, ps in snap.items() if pid != server}
        assert runs, "the run was never seen working in its run folder"
        roots = {pid: ps for pid, ps in runs.items() if ps[0] == os.getpid()}
        assert len(roots) == 1, runs  # one run: one process, a child of the checker
        for pid, (_, session, cmd) in roots.items():
            assert session == pid and "checker.forkserver" in cmd, (pid, session, cmd)  # own session; a fork
        assert set(_in(h.workdir)) == {server}  # nothing of the run is left
    finally:
        h.close()
    assert _in(h.workdir) == {}


def test_when_the_server_is_gone_runs_start_as_plain_processes(tmp_path, monkeypatch):
    h = _harness(tmp_path, "w", "lab1", monkeypatch)
    h.forkserver.proc.kill()
    h.forkserver.proc.wait()
    try:
        run = h.run("probe", "probe", {}, budget_s=60)
    finally:
        h.close()
    assert run.error() is None and not run.forked and run.result["device"] == "cpu", run.log_tail()
    assert h.forkserver.ready is False and h.forkserver.why_not


def test_the_server_is_off_when_asked_or_where_the_device_may_be_a_gpu(monkeypatch):
    monkeypatch.setenv("CHECKER_FORKSERVER", "0")
    assert forkserver.usable("cpu", True) == "CHECKER_FORKSERVER=0"
    monkeypatch.setenv("CHECKER_FORKSERVER", "1")
    assert forkserver.usable("cuda", True) == "the runs' device may be a GPU"
    assert forkserver.usable("cpu", False) == "the checker is not a child subreaper"
    assert forkserver.usable("cpu", True) is None
