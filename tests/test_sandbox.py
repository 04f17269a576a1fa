"""The sandbox and the result channel, piece by piece (the whole-grade cases are in tests/test_hostile.py):
bwrap's command line, GPU device files bound in (a fake /dev), loopback only, the course digest, the
pipe's first-final-result rule and clock check, and the CLI's refusals."""
import json
import os
import subprocess
import sys
import time

import pytest

from checker import channel, sandbox
from conftest import ROOT, needs_sandbox, run_checker

pytestmark = pytest.mark.timeout(120)


def test_bwrap_command_mounts_the_course_read_only_and_the_run_folder_writable(tmp_path):
    course, run = tmp_path / "course", tmp_path / "run"
    course.mkdir(), run.mkdir()
    cmd = sandbox.wrap(["python", "-V"], run, readable=[course], writable=[])
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent"):
        assert flag in cmd
    assert cmd[cmd.index("--ro-bind") + 1:cmd.index("--ro-bind") + 3] == ["/", "/"]
    joined = " ".join(cmd)
    assert f"--ro-bind {course} {course}" in joined and f"--bind {run} {run}" in joined
    assert joined.index("--tmpfs /tmp") < joined.index(f"--ro-bind {course}")  # re-bound after /tmp is hidden
    assert cmd[-3:] == ["--", "python", "-V"]


def test_gpu_device_files_are_bound_in(tmp_path):
    fake = tmp_path / "root"
    (fake / "dev" / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1"):
        (fake / "dev" / name).touch()
    binds = sandbox.gpu_binds(str(fake))
    pairs = {binds[i + 2]: binds[i + 1] for i in range(0, len(binds), 3)}
    assert set(pairs) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps/nvidia-cap1"}
    assert all(binds[i] == "--dev-bind" for i in range(0, len(binds), 3))
    assert sandbox.wrap(["true"], tmp_path, [], [], dev_root=str(fake)).count("--dev-bind") == 4


@needs_sandbox()
def test_inside_the_sandbox_only_loopback_the_course_read_only_and_own_pids(tmp_path):
    probe = ("import os, socket, sys; print(sorted(n for _, n in socket.if_nameindex()));"
             "print(os.access(sys.argv[1], os.W_OK)); print(len([p for p in os.listdir('/proc') if p.isdigit()]))")
    cmd = sandbox.wrap([sys.executable, "-c", probe, str(ROOT / "checker")], tmp_path,
                       readable=[ROOT, *sandbox.python_prefixes()], writable=[])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.split("\n")
    assert out[0] == "['lo']" and out[1] == "False" and int(out[2]) <= 3, out


def test_the_digest_sees_any_change_to_the_course(tmp_path):
    for part in ("checker", "solutions", "labs/common", "labs/instruments", "labs/notebook"):
        (tmp_path / part).mkdir(parents=True)
        (tmp_path / part / "a.py").write_text("x = 1\n")
    before = sandbox.course_digest(tmp_path)
    (tmp_path / "checker" / "a.py").write_text("x = 1\nCHECKS_PASS = True\n")
    (tmp_path / "solutions" / "b.py").write_text("")
    (tmp_path / "labs" / "instruments" / "a.py").write_text("x = 2\n")
    assert sandbox.changed_files(before, sandbox.course_digest(tmp_path)) == [
        "checker/a.py", "labs/instruments/a.py", "solutions/b.py"]


def test_the_first_final_result_wins_and_a_slow_clock_is_refused(tmp_path):
    out = tmp_path / "run.result.json"
    ch = channel.Channel(out, 1, nonce="n1")
    try:
        s = channel.Sender(out, 0, "n1")
        t0 = time.perf_counter()
        s.send(mark=t0)
        s.send(result={"ratio": 0.5}, final=True)
        time.sleep(0.6)
        s.send(mark=t0 + 0.1)                          # 0.1 s by this clock, 0.6 s by the checker's
        s.send(result={"ratio": 1.02}, final=True)     # an atexit rewrite: too late
        channel.Sender(out, 0, "other").send(result={"ratio": 9.9}, final=True)  # no nonce: ignored
        time.sleep(0.5)
    finally:
        ch.close()
    assert ch.results == {0: {"ratio": 0.5}}
    ch.final.clear()
    ch.marks = {0: [(0.0, 0.0), (0.1, 0.6)]}
    assert ch.clock_error()["type"] == "ClockMismatch"
    ch.marks = {0: [(0.0, 0.0), (0.6, 0.62)]}
    assert ch.clock_error() is None


def test_json_path_is_checked_by_opening_it(tmp_path):
    r = run_checker("grade", "lab1", "--solutions", "--json", "/proc/x.json")
    assert r.returncode == 2 and "cannot write the --json report to /proc/x.json" in r.stderr
    assert r.stderr.count("\n") == 1


def test_submissions_need_the_sandbox_unless_told_otherwise(tmp_path):
    (tmp_path / "ada").mkdir()
    r = run_checker("grade", "lab1", "--submissions", tmp_path, env={"CHECKER_SANDBOX": "0"})
    assert r.returncode == 2 and "apt-get install bubblewrap" in r.stderr and "--no-sandbox" in r.stderr


@pytest.mark.timeout(400)
def test_without_a_sandbox_a_grade_says_so_in_one_line(tmp_path):
    r = run_checker("grade", "lab1", "--solutions", "--only", "memory_reported", "--json", tmp_path / "r.json",
                    env={"CHECKER_SANDBOX": "0"})
    assert r.returncode == 0
    assert [ln for ln in r.stdout.splitlines()
            if ln.startswith("not sandboxed")] == ["not sandboxed: CHECKER_SANDBOX=0"]
    assert json.loads((tmp_path / "r.json").read_text())["sandbox"] == "not sandboxed: CHECKER_SANDBOX=0"
    from checker.cli import _sandbox_line, build_parser
    assert _sandbox_line(build_parser().parse_args(["grade", "lab1", "--no-sandbox"])).startswith(
        "not sandboxed (--no-sandbox)")


def test_limits_hit_are_named():
    from checker import limits

    err = limits.explain({"type": "RuntimeError", "message": "DefaultCPUAllocator: can't allocate memory: you "
                                                             "tried to allocate 99999999999 bytes"})
    assert err["message"].startswith(f"killed: used more than {limits.AS_GIB} GiB")
    env = limits.env(cpu=True)
    assert set(env) == {"CHECKER_LIMIT_AS_GIB", "CHECKER_LIMIT_FSIZE_GIB", "CHECKER_LIMIT_NPROC"}
    assert "CHECKER_LIMIT_AS_GIB" not in limits.env(cpu=False)  # CUDA maps more address space than it uses
    code = ("import os, resource; from checker import limits; limits.apply();"
            "print(resource.getrlimit(resource.RLIMIT_AS)[1] >> 30); bytearray(20 << 30)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "CHECKER_LIMIT_AS_GIB": "16"})
    assert r.stdout.strip() == "16" and "MemoryError" in r.stderr
