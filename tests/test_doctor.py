"""`checker doctor`: the real run on this machine, and each failure path fed through a check's inputs."""
import io
import re
import uuid
from argparse import Namespace
from collections import namedtuple

import pytest
import torch
from rich.console import Console

from checker import doctor
from checker.doctor import Row
from conftest import load_json, processes_with, run_checker

pytestmark = pytest.mark.timeout(60)


@pytest.mark.timeout(120)
def test_doctor_on_this_machine_passes_with_a_verdict_per_row_and_a_bandwidth(tmp_path):
    out = tmp_path / "doctor.json"
    r = run_checker("doctor", "--json", out, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = load_json(out)
    rows = {row["name"]: row for row in rep["rows"]}
    assert rep["passed"] and {"python", "torch", "gpu", "backends", "course_pick", "free_port", "shm", "cpus",
                              "memory", "env", "data", "sandbox", "slurm", "allreduce",
                              "allreduce_latency"} <= set(rows)
    assert all(row["verdict"] in ("ok", "warn") for row in rep["rows"])
    assert rows["allreduce"]["unit"] == "GB/s busbw" and rows["allreduce"]["value"] > 0
    assert rows["allreduce_latency"]["value"] > 0
    assert len(re.findall(r"│ (?:OK|WARN|FAIL) +│", r.stdout)) == len(rep["rows"])  # one verdict per row
    assert re.search(r"doctor: \d+ ok, \d+ warn, 0 fail", r.stdout)


def test_json_path_that_cannot_be_written_exits_2_before_running():
    r = run_checker("doctor", "--json", "/nonexistent-dir/d.json")
    assert r.returncode == 2 and "cannot write the --json report" in r.stderr


def test_a_failed_row_exits_1_and_is_shown(tmp_path):
    rows = [Row("free_port", "fail", None, "no port [red]at all[/]"), Row("env", "warn", "[x]", "careful")]
    buf = io.StringIO()
    args = Namespace(device="auto", json=str(tmp_path / "d.json"), timeout=1.0)
    assert doctor.main(args, Console(file=buf, width=120), run=lambda prefer, t: rows) == 1
    assert "FAIL" in buf.getvalue() and "[red]at all[/]" in buf.getvalue()  # messages are never markup
    assert "1 warn, 1 fail" in buf.getvalue()
    assert load_json(tmp_path / "d.json")["passed"] is False


def test_no_free_port_is_a_fail_that_says_what_to_try():
    def refuse():
        raise OSError(98, "Address already in use")
    row = doctor.check_port(refuse)
    assert row.verdict == "fail" and "Address already in use" in row.message and "ss -s" in row.message
    assert doctor.check_port().verdict == "ok"


@pytest.mark.parametrize("available", [{}, {"gloo": False, "nccl": False, "mpi": False}])
def test_no_backend_is_a_fail(available):
    row = doctor.check_backends(available)
    assert row.verdict == "fail" and "reinstall torch" in row.message


def test_the_course_pick_fails_when_its_backend_is_missing_or_the_choice_is_bad():
    assert doctor.check_pick("cpu").verdict == "ok"
    row = doctor.check_pick("cpu", {"gloo": False, "mpi": True})
    assert row.verdict == "fail" and "lacks gloo" in row.message
    assert doctor.check_pick("tpu").verdict == "fail"


@pytest.mark.parametrize("var,value,bad", [
    ("GLOO_SOCKET_IFNAME", "eth9", "eth9"),
    ("GLOO_SOCKET_IFNAME", "eth0,ib0", "ib0"),
    ("GLOO_SOCKET_IFNAME", "eth", "eth"),            # gloo wants exact names
    ("NCCL_SOCKET_IFNAME", "ib", "ib"),              # NCCL takes prefixes ...
    ("NCCL_SOCKET_IFNAME", "=eth", "eth"),           # ... or exact names after '='
    ("GLOO_SOCKET_IFNAME", "eth0,lo", None),
    ("NCCL_SOCKET_IFNAME", "eth", None),
    ("NCCL_SOCKET_IFNAME", "^docker,lo", None),      # exclusions never name a missing interface
])
def test_socket_ifname_naming_a_missing_interface_fails_and_lists_the_real_ones(var, value, bad):
    rows = {r.name: r for r in doctor.check_env({var: value}, ["eth0", "lo"])}
    assert f"{var}={value}" in rows["env"].message
    if bad is None:
        assert var not in rows
    else:
        assert rows[var].verdict == "fail"
        assert f"interface on this machine: {bad} (here: eth0, lo)" in rows[var].message


def test_env_footguns_warn_and_a_clean_env_is_ok():
    assert [(r.name, r.verdict) for r in doctor.check_env({"PATH": "/bin"}, ["lo"])] == [("env", "ok")]
    env = {"MASTER_PORT": "29500", "RANK": "0", "CUDA_VISIBLE_DEVICES": "", "NCCL_P2P_DISABLE": "1",
           "COURSE_DEVICE": "tpu"}
    verdicts = {r.name: r.verdict for r in doctor.check_env(env, ["lo"])}
    assert verdicts == {"env": "ok", "MASTER_PORT": "warn", "launcher_vars": "warn", "CUDA_VISIBLE_DEVICES": "warn",
                        "nccl_disabled": "warn", "COURSE_DEVICE": "fail"}


def test_small_or_missing_shm_warns():
    usage = namedtuple("usage", "total used free")
    assert doctor.check_shm(usage=lambda p: usage(64 << 20, 0, 64 << 20)).verdict == "warn"
    assert doctor.check_shm(usage=lambda p: usage(8 << 30, 0, 8 << 30)).verdict == "ok"
    assert doctor.check_shm("/no/such/shm").verdict == "warn"


def test_versions_gpu_machine_and_data_rows(tmp_path):
    assert doctor.check_versions((3, 9, 1), "2.13.0", ">=2.10,<2.16")[0].verdict == "fail"
    old = doctor.check_versions((3, 11, 0), "2.5.1+cu124", ">=2.10,<2.16")[1]
    assert old.verdict == "warn" and "outside the supported range torch>=2.10,<2.16" in old.message
    gpu_node = doctor.check_versions((3, 11, 0), "2.11.0+cu130", ">=2.10,<2.16", ["reduce_scatter_single"])[1]
    assert gpu_node.verdict == "ok" and gpu_node.value == "2.11.0+cu130"
    assert "in the supported range torch>=2.10,<2.16" in gpu_node.message and "adds reduce_scatter_single" in \
        gpu_node.message
    gone = {"available": False, "build": None, "driver": True}
    assert "CPU build" in doctor.check_gpu(gone).message
    assert doctor.check_gpu({**gone, "driver": False}).verdict == "ok"
    assert [r.verdict for r in doctor.check_machine(cpus=1, mem_available=1 << 30)] == ["warn", "warn"]
    row = doctor.check_data([tmp_path / "markov-v256-s0"])
    assert row.verdict == "warn" and "make data" in row.message


def _fake_smoke(calls, err=0.0):
    def smoke(prefer, world, timeout_s):
        calls.append(prefer)
        return {"ok": True, "device": "cpu", "backend": "gloo",
                "rows": [{"bytes": b, "seconds": 1e-3, "busbw": 1e9, "max_abs_err": err} for b in (1024, 16 << 20)]}
    return smoke


def test_a_wrong_sum_fails_and_one_gpu_for_two_ranks_warns_and_measures_the_cpu():
    calls = []
    assert doctor.check_smoke("cpu", smoke=_fake_smoke(calls, err=1.0))[0].verdict == "fail"
    # "meta" stands in for any accelerator: the check asks pick_device, never names one itself
    rows = doctor.check_smoke("auto", gpus=1, pick=lambda p: (torch.device("meta"), "x"), smoke=_fake_smoke(calls))
    assert [r.verdict for r in rows] == ["warn", "ok", "ok"] and "--device cpu" in rows[0].message
    assert calls == ["cpu", "cpu"]


@pytest.mark.parametrize("kw,needle", [
    (dict(backend="bogus"), "bogus"),                    # a rank crashes: its error, peers stopped at once
    (dict(crash="hang-all", timeout_s=4), "no result within 4 s"),  # every rank hangs: killed at the deadline
])
def test_smoke_test_failure_is_a_fail_row_and_leaves_no_process(kw, needle):
    tag = f"doctor-{uuid.uuid4().hex}"
    rows = doctor.check_smoke("cpu", tag=tag, **{"timeout_s": 30, **kw})
    assert [(r.name, r.verdict) for r in rows] == [("allreduce", "fail")]
    assert needle in rows[0].message and "TORCH_DISTRIBUTED_DEBUG" in rows[0].message
    assert processes_with(tag) == []


def test_the_sandbox_row_says_whether_batch_grading_can_run_here():
    ok = doctor.check_sandbox(lambda: None)
    assert ok.verdict == "ok" and "--submissions" in ok.message
    missing = doctor.check_sandbox(lambda: "bubblewrap is not installed (sudo apt-get install bubblewrap)")
    assert missing.verdict == "warn" and "batch grading" in missing.message and "refuses" in missing.message
    assert "apt-get install bubblewrap" in missing.message and "--no-sandbox" in missing.message
    assert doctor.check_sandbox().verdict == ("ok" if doctor.sandbox.why_not() is None else "warn")  # this machine's


def test_the_slurm_row_says_whether_sbatch_and_squeue_answer():
    ok = doctor.check_slurm(lambda: None, lambda: None, lambda: "debug* 1 2 idle")
    assert ok.verdict == "ok" and "debug* 1 2 idle" in ok.message
    down = doctor.check_slurm(lambda: "sinfo did not answer within 20 s: is slurmctld running?", lambda: None)
    assert down.verdict == "warn" and "slurmctld" in down.message and "NOT RUN" in down.message
    assert "make slurm-up" in down.message
    no_queue = doctor.check_slurm(lambda: None, lambda: "squeue failed: Invalid user")
    assert no_queue.verdict == "warn" and "Invalid user" in no_queue.message
    real = doctor.check_slurm()  # this machine's, whichever it is
    assert real.verdict == ("ok" if doctor.slurm.unavailable() is None else "warn")


def test_a_warned_row_is_named_in_the_closing_line():
    buf = io.StringIO()
    rows = [Row("sandbox", "warn", "none", "no bwrap"), Row("cpus", "ok", 2, "fine")]
    doctor.render(rows, Console(file=buf, width=120), 1.0)
    assert "ready for the labs, except what the warned rows say (sandbox)" in buf.getvalue()
