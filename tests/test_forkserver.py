"""The run server (checker/forkserver.py), the one way a graded run starts: a forked run computes what a fresh
process computes, is the server's child in its own session and dies whole; a process a run moves out of its tree
is ended when the run ends; sandboxed, the harness sees the runs under their own pids; a server learner code
killed is started again; and it forks only where that is safe."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from checker import forkserver, launch
from checker.harness import Harness
from conftest import ROOT, needs_sandbox

pytestmark = pytest.mark.timeout(180)


def _harness(tmp_path, name, lab, monkeypatch, fork=True, **kw):
    monkeypatch.setenv("CHECKER_FORKSERVER", "1" if fork else "0")
    workdir = tmp_path / name
    workdir.mkdir()
    return Harness(workdir, lab, "solutions", "cpu", **kw)


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
    """Two ranks of lab 2's seeded DDP training with dropout, forked and started fresh: bit-identical losses."""
    spec = dict(name="train", task="train", nproc=2, budget_s=90, args=dict(seed=3, steps=4))
    got = {}
    for fork in (True, False):
        h = _harness(tmp_path, f"fork{fork}", "lab2", monkeypatch, fork=fork)
        try:
            h.run("probe", "probe", {}, budget_s=60)  # served while the server is still importing
            run = h.run(**spec)
        finally:
            h.close()
        assert run.error() is None and run.returncode == 0, run.log_tail()
        assert run.forked == fork
        got[fork] = [(r["losses"], r["digest"]) for r in run.results]
    assert len(got[True]) == 2 and len(got[True][0][0]) == 4
    assert got[True] == got[False]


def test_a_forked_run_is_the_servers_child_in_its_own_session_and_dies_whole(tmp_path, monkeypatch):
    seen = []
    h = _harness(tmp_path, "w", "lab1", monkeypatch, on_progress=lambda _: seen.append(_in(h.workdir)))
    server = h.forkserver.pid
    try:
        h.run("probe", "probe", {}, budget_s=60)
        seen.clear()
        # killed by the harness (SIGKILL to its session) once it has saved, as a preemption is
        run = h.run("resume_1", "train", dict(seed=1, steps=400, save_at=3, ckpt=str(h.workdir / "c.pt")),
                    budget_s=60, kill_on="saved")
        assert run.forked and run.killed_on_cue and run.result.get("losses"), run.log_tail()
        runs = {pid: ps for snap in seen for pid, ps in snap.items() if pid != server}
        assert runs, "the run was never seen working in its run folder"
        roots = {pid: ps for pid, ps in runs.items() if ps[0] == server}
        assert len(roots) == 1, runs  # one run: one process, a child of the server
        for pid, (_, session, cmd) in roots.items():
            assert session == pid and "checker.forkserver" in cmd, (pid, session, cmd)  # own session; a fork
        assert set(_in(h.workdir)) == {server}  # nothing of the run is left
    finally:
        h.close()
    assert _in(h.workdir) == {}


ESCAPE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(sys.argv[1], "w").write(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
time.sleep(0.5)
"""

WATCH = """
import json, os, sys, time
time.sleep(3)
pid = int(open(sys.argv[1]).read())
try:
    os.kill(pid, 0)
    alive = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
except ProcessLookupError:
    alive = False
open(sys.argv[2], "w").write(json.dumps(alive))
"""


@pytest.mark.parametrize("sandboxed", [False, pytest.param(True, marks=needs_sandbox())])
def test_a_process_a_run_moved_out_of_its_tree_ends_when_that_run_ends(tmp_path, monkeypatch, sandboxed):
    """Run A double-forks a setsid sleeper and exits; run B, still running beside it, finds it gone."""
    h = _harness(tmp_path, "w", "lab1", monkeypatch, sandboxed=sandboxed)
    pidfile, verdict = h.workdir / "escapee.pid", h.workdir / "verdict.json"
    try:
        runs = h.run_many([dict(name="escape", task="", budget_s=30, argv=[sys.executable, "-c", ESCAPE, str(pidfile)]),
                           dict(name="watch", task="", budget_s=30,
                                argv=[sys.executable, "-c", WATCH, str(pidfile), str(verdict)])], parallel=2)
    finally:
        h.close()
    assert runs["escape"].returncode == 0 and runs["watch"].returncode == 0, runs["watch"].log_tail()
    assert json.loads(verdict.read_text()) is False, "the escaped process outlived its run"
    assert _in(h.workdir) == {}


@needs_sandbox()
def test_sandboxed_runs_are_forks_and_the_harness_sees_them_under_its_own_pids(tmp_path, monkeypatch):
    seen = []
    h = _harness(tmp_path, "w", "lab1", monkeypatch, sandboxed=True, on_progress=lambda _: seen.append(_in(h.workdir)))
    try:
        h.run("probe", "probe", {}, budget_s=60)
        run = h.run("resume_1", "train", dict(seed=1, steps=400, save_at=3, ckpt=str(h.workdir / "c.pt")),
                    budget_s=60, kill_on="saved")
        assert run.forked and run.killed_on_cue and run.result.get("losses"), run.log_tail()
        assert h.forkserver.pid != h.forkserver.proc.pid  # the server is inside bwrap's namespace
        children = {pid for snap in seen for pid, ps in snap.items() if ps[0] == h.forkserver.pid}
        assert children, "no run was seen as the server's child"
        assert set(_in(h.workdir)) <= h.forkserver.own  # the run was killed whole, by its host pid
    finally:
        h.close()
    assert _in(h.workdir) == {}


SIGNALS_SEEN = """
import json, os, signal
def _pipes():
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{{fd}}").startswith("pipe:"):
                yield fd
        except OSError:  # listdir's own, closed by now
            pass
os.makedirs("{out}", exist_ok=True)
json.dump({{"sigchld": str(signal.getsignal(signal.SIGCHLD)), "wakeup_fd": signal.set_wakeup_fd(-1),
           "pipes": list(_pipes())}}, open("{out}/seen.json", "w"))
"""


def test_a_forked_run_starts_with_sigchld_as_a_fresh_process_has_it(tmp_path, monkeypatch, lab_tree):
    """The server wakes on SIGCHLD (a handler writing to a pipe); a run it forks has neither, as a fresh one."""
    tree = lab_tree()
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(SIGNALS_SEEN.format(out=tmp_path / "seen") + init.read_text())  # runs at the learner's import
    monkeypatch.setenv("CHECKER_FORKSERVER", "1")
    (tmp_path / "w").mkdir()
    h = Harness(tmp_path / "w", "lab1", "labs", "cpu", root=tree)
    try:
        run = h.run("probe", "probe", {}, budget_s=60)
    finally:
        h.close()
    seen = json.loads((tmp_path / "seen" / "seen.json").read_text())
    assert run.forked and run.error() is None, run.log_tail()
    assert seen["sigchld"] == str(signal.SIG_DFL) and seen["wakeup_fd"] == -1, seen
    assert seen["pipes"] == [], seen  # its stdio is /dev/null and its log, its result pipe a named one


def test_a_server_that_was_killed_is_started_again(tmp_path, monkeypatch):
    h = _harness(tmp_path, "w", "lab1", monkeypatch)
    first = h.forkserver
    first.proc.kill()
    first.proc.wait()
    try:
        run = h.run("probe", "probe", {}, budget_s=60)
    finally:
        h.close()
    assert h.forkserver is not first
    assert run.error() is None and run.forked and run.result["device"] == "cpu", run.log_tail()


def test_a_run_whose_server_died_ends_at_once_and_leaves_nothing(tmp_path, monkeypatch):
    h = _harness(tmp_path, "w", "lab1", monkeypatch)
    server, t0 = h.forkserver, time.monotonic()

    def kill_server(_):
        if time.monotonic() - t0 > 1.0 and server.alive():
            server.proc.kill()

    h.on_progress = kill_server
    try:
        run = h.run("sleeper", "", {}, budget_s=60, argv=[sys.executable, "-c", "import time; time.sleep(60)"])
    finally:
        h.close()
    assert run.returncode == 255 and run.seconds < 15, (run.returncode, run.seconds)
    assert _in(h.workdir) == {}


def test_a_server_that_stopped_answering_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "REPLY_TIMEOUT_S", 3.0)
    h = _harness(tmp_path, "w", "lab1", monkeypatch)
    stopped = h.forkserver
    os.kill(stopped.proc.pid, signal.SIGSTOP)  # alive, silent
    try:
        run = h.run("probe", "probe", {}, budget_s=60)
    finally:
        h.close()
    assert h.forkserver is not stopped and stopped.proc.returncode is not None
    assert run.error() is None and run.result["device"] == "cpu", run.log_tail()


FORK_SAFE = """
import sys, threading, types
from checker import forkserver, launch
seen = [forkserver.fork_safe()]
stop = threading.Event()
t = threading.Thread(target=stop.wait)
t.start()
seen.append(forkserver.fork_safe())  # another thread may hold a lock the fork would copy
stop.set()
t.join()
import torch
seen.append(forkserver.fork_safe())  # importing torch starts no thread and no CUDA context
forkserver.GPU_DEVICE_FILES = (sys.argv[1],)
held = open(sys.argv[1], "w")
seen.append(forkserver.fork_safe())  # a GPU driver's device file is open: its state cannot be shared
held.close()
sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
seen.append(forkserver.fork_safe())  # a CUDA context cannot be shared with a child
print(seen)
"""


def test_fork_only_where_it_is_safe(monkeypatch, tmp_path):
    env = {**os.environ, "CHECKER_FORKSERVER": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", FORK_SAFE, str(tmp_path / "nvidia0")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[True, False, True, False, False]", out.stdout + out.stderr
    monkeypatch.setenv("CHECKER_FORKSERVER", "0")
    assert not forkserver.fork_safe()
