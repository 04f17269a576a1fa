"""The CUDA-only logic, tested here without a GPU: fakes stand in for the device (a fake device count,
fake torch.cuda calls), never a silent skip. What only a real GPU can tell is in `make gpu-check`
(bench/gpu_check.py)."""
from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from checker import batch, cli, placement
from conftest import ROOT
from labs.common import dist as cdist
from labs.common import metrics, precision


# ---------------------------------------------------------------- placement
def test_visible_gpus_follow_cuda_visible_devices_then_the_driver(monkeypatch):
    assert placement.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"]
    assert placement.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert placement.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    monkeypatch.setattr(placement, "gpu_count", lambda: 8)
    assert placement.visible_gpus({}) == [str(i) for i in range(8)]


def test_gpu_count_without_a_driver_is_zero_and_imports_no_torch(monkeypatch, tmp_path):
    monkeypatch.setattr(placement, "NVIDIA_PROC", tmp_path / "absent")
    assert placement.gpu_count() == 0
    assert not placement.uses_gpu("auto", {}) and placement.uses_gpu("cuda", {})


def test_gpu_count_with_a_driver_asks_torch(monkeypatch, tmp_path):
    monkeypatch.setattr(placement, "NVIDIA_PROC", tmp_path)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert placement.gpu_count() == 8


def test_concurrent_runs_get_disjoint_gpus_and_wait_when_none_are_free():
    pool = placement.GpuPool([str(i) for i in range(8)])
    a, b, c = pool.acquire(2), pool.acquire(2), pool.acquire(3)
    assert a == ["0", "1"] and b == ["2", "3"] and c == ["4", "5", "6"]
    assert pool.acquire(2) is None  # one GPU left: this run waits for another to finish
    pool.release(b)
    assert pool.acquire(2) == ["2", "3"]


def test_oversubscription_is_refused_with_what_to_do():
    with pytest.raises(placement.Oversubscribed, match="NCCL cannot put two ranks.*COURSE_BACKEND=gloo"):
        placement.GpuPool(["0"]).acquire(2)
    # gloo over CUDA tensors: two ranks may share the GPU (make gpu-check on one GPU)
    shared = placement.GpuPool(["0"], placement.ranks_per_gpu({"COURSE_BACKEND": "gloo"}))
    assert shared.acquire(2) == ["0"]
    assert placement.ranks_per_gpu({}) == 1


def test_batch_learners_get_disjoint_blocks_and_too_many_are_refused():
    gpus = [str(i) for i in range(8)]
    blocks = batch.gpu_blocks(gpus, parallel=4, world=2)
    assert blocks == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]
    assert batch.gpu_blocks(gpus, parallel=2, world=2) == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]
    with pytest.raises(placement.Oversubscribed, match="Lower --parallel to 4"):
        batch.gpu_blocks(gpus, parallel=8, world=2)


def test_harness_gives_each_run_its_own_gpus(monkeypatch, tmp_path):
    """Two 2-rank runs at once on a fake 4-GPU node: each run's environment names its own two GPUs and the
    deterministic settings; a third waits for a free pair."""
    from checker import harness

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.delenv("COURSE_BACKEND", raising=False)
    seen = []

    class FakeServer:  # the run server's launch, without processes: what each run's environment would be
        def __init__(self, *a, **kw):
            self.own, self.pid = set(), None

        def alive(self):
            return True

        def launch(self, args, argv, nproc, env, cwd, log):
            seen.append(env["CUDA_VISIBLE_DEVICES"])
            return SimpleNamespace(pid=None, forked=True, returncode=0, poll=lambda: 0, wait=lambda: 0)

    monkeypatch.setattr(harness.launch, "ForkServer", FakeServer)
    monkeypatch.setattr(harness.Harness, "_kill", lambda self, st, dump_stacks=False: "")
    h = harness.Harness(tmp_path, "lab2", "solutions", device="cuda")
    assert h.gpus is not None
    specs = [dict(name=f"r{i}", task="x", nproc=2, budget_s=5) for i in range(3)]
    runs = h.run_many(specs, parallel=3)
    assert set(runs) == {"r0", "r1", "r2"}
    assert seen[:2] == ["0,1", "2,3"] and seen[2] in ("0,1", "2,3")
    env = h._env("n")
    env.update(placement.cuda_env(["1"]))
    assert env["COURSE_DETERMINISTIC"] == "1" and env["CUBLAS_WORKSPACE_CONFIG"] == cdist.CUBLAS_WORKSPACE
    with pytest.raises(placement.Oversubscribed):
        h.run_many([dict(name="big", task="x", nproc=5, budget_s=5)])


def test_grade_on_cuda_without_a_gpu_exits_2_in_seconds(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "checker", "grade", "lab1", "--solutions", "--device", "cuda"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and time.monotonic() - t0 < 30
    assert p.stderr.strip().count("\n") == 0 and "no GPU is visible" in p.stderr


def test_bf16_grading_is_refused_for_labs_with_fp32_tolerances():
    with pytest.raises(cli.UsageError, match="lab1 only"):
        cli._check_device(cli.build_parser().parse_args(["grade", "lab2", "--precision", "bf16"]))


def test_pick_device_maps_local_rank_onto_the_visible_gpus_and_sets_determinism(monkeypatch):
    """A fake 2-GPU node: rank 3 of a run shown 2 GPUs takes cuda:1; COURSE_DETERMINISTIC applies the settings."""
    calls = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.setdefault("set_device", d))
    monkeypatch.setattr(torch, "use_deterministic_algorithms",
                        lambda on, warn_only=False: calls.update(det=(on, warn_only)))
    for k in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp", "enable_math_sdp"):
        if hasattr(torch.backends.cuda, k):
            monkeypatch.setattr(torch.backends.cuda, k, lambda on, k=k: calls.update({k: on}))
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setenv("COURSE_DETERMINISTIC", "1")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("COURSE_BACKEND", raising=False)
    device, backend = cdist.pick_device("cuda", local_rank=3)
    assert device == torch.device("cuda", 1) and backend == "nccl" and calls["set_device"] == device
    assert calls["det"] == (True, True) and calls["enable_flash_sdp"] is False and calls["enable_math_sdp"] is True
    assert calls["enable_mem_efficient_sdp"] is False
    import os
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and torch.backends.cudnn.deterministic
    monkeypatch.setenv("COURSE_BACKEND", "gloo")
    assert cdist.pick_device("cuda", 0)[1] == "gloo"
    monkeypatch.setenv("COURSE_BACKEND", "mpi")
    with pytest.raises(ValueError, match="COURSE_BACKEND"):
        cdist.pick_device("cuda", 0)


def test_device_rng_state_is_this_devices_only(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda i: torch.tensor([i]))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: pytest.fail("saves every GPU's state"))
    assert cdist.device_rng_state().tolist() == [1]
    restored = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, i: restored.append((s.tolist(), i)))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda s: pytest.fail("restores every GPU"))
    cdist.set_device_rng_state(torch.tensor([7]))
    cdist.set_device_rng_state([torch.tensor([5]), torch.tensor([6])])  # one state per GPU: this device's entry
    assert restored == [([7], 1), ([6], 1)]


# ---------------------------------------------------------------- precision and MFU
@pytest.mark.parametrize("name,dtype,tflops", [
    ("NVIDIA H200", "bf16", 989.4), ("NVIDIA H100 80GB HBM3", "bf16", 989.4), ("NVIDIA H100 PCIe", "bf16", 756),
    ("NVIDIA H100 NVL", "bf16", 835.5), ("NVIDIA A100-SXM4-80GB", "tf32", 156), ("NVIDIA A100 80GB PCIe", "fp32", 19.5),
    ("NVIDIA A100-SXM4-40GB", "bf16", 312), ("NVIDIA L40S", "bf16", 362.05), ("NVIDIA L4", "bf16", 121),
    ("NVIDIA A10G", "bf16", 70), ("NVIDIA GeForce RTX 4090", "bf16", 165.2), ("NVIDIA H100 80GB HBM3", "fp32", 67)])
def test_peak_table_matches_exact_names(monkeypatch, name, dtype, tflops):
    monkeypatch.delenv("COURSE_PEAK_FLOPS", raising=False)
    assert metrics.peak_flops(name, dtype) == pytest.approx(tflops * 1e12)


def test_unknown_gpu_is_said_not_guessed(monkeypatch, capsys):
    monkeypatch.delenv("COURSE_PEAK_FLOPS", raising=False)
    cuda = torch.device("cuda", 0)
    assert metrics.peak_flops("NVIDIA H100") is None  # a prefix is not a model: PCIe and SXM differ by 30%
    peak, why = metrics.device_peak_or_none(cuda, "NVIDIA B300", "bf16")
    assert peak is None and "pass --peak-tflops" in why
    assert metrics.device_peak_flops(cuda, "NVIDIA B300", "bf16") is None
    assert "pass --peak-tflops" in capsys.readouterr().err
    assert metrics.device_peak_or_none(cuda, "NVIDIA B300", "bf16", peak_tflops=2250)[0] == 2250e12


def test_peak_key_follows_the_precision_used(monkeypatch):
    cuda = torch.device("cuda", 0)
    assert precision.peak_key("bf16", cuda) == "bf16"
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    assert precision.peak_key("fp32", cuda) == "fp32"
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert precision.peak_key("fp32", cuda) == "tf32" and precision.peak_key("fp32", torch.device("cpu")) == "fp32"


def test_bf16_autocast_trains_with_fp32_masters_on_cpu():
    """The bf16 path runs in CI: matmuls in bf16, weights/grads/moments fp32, loss close to fp32's."""
    from labs.common.model import build_model
    from labs.common.optim import make_optimizer

    cpu = torch.device("cpu")
    losses = {}
    for p in precision.PRECISIONS:
        torch.manual_seed(0)
        model = build_model("tiny")
        opt = make_optimizer(model)
        x = torch.randint(0, model.cfg.vocab_size, (4, 32))
        with precision.autocast(cpu, p):
            logits, loss = model(x, x)
        assert logits.dtype == precision.DTYPES[p]
        loss.backward()
        opt.step()
        assert all(t.dtype == torch.float32 for t in model.parameters())
        assert all(v.dtype == torch.float32 for s in opt.state.values() for v in s.values() if v.dim())
        losses[p] = loss.item()
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=2e-2) and losses["bf16"] != losses["fp32"]
    with pytest.raises(ValueError):
        precision.autocast(cpu, "fp16")


def test_sharded_engines_take_the_same_switch():
    assert precision.fsdp_kwargs("bf16") == {"mixed_precision": True} and precision.fsdp_policy("fp32") is None
    pol = precision.fsdp_policy("bf16")
    assert pol.param_dtype == torch.bfloat16 and pol.reduce_dtype == torch.float32
    cfg = precision.deepspeed_config({"bf16": {"enabled": False}, "zero_optimization": {"stage": 2}}, "bf16")
    assert cfg["bf16"] == {"enabled": True} and cfg["fp16"] == {"enabled": False} and cfg["zero_optimization"]


def test_lab_scripts_take_precision(monkeypatch):
    from solutions.lab1_baseline import train as t1
    from solutions.lab2_ddp import train as t2
    from solutions.lab5_scheduler import train as t5

    for mod in (t1, t2, t5):
        assert mod.parse_args(["--precision", "bf16"]).precision == "bf16"
    monkeypatch.setenv("COURSE_PRECISION", "bf16")
    assert t1.parse_args([]).precision == "bf16"


def test_make_gpu_check_refuses_without_a_gpu():
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "bench.gpu_check"], capture_output=True, text=True, timeout=60,
                       env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert p.returncode != 0 and "no GPU is visible" in p.stderr and time.monotonic() - t0 < 30


def test_gpu_check_measures_the_compiled_bf16_step_apart_from_its_compilation(monkeypatch):
    """gpu_check's throughput rows on the CPU, torch.compile faked (the wiring, not the compiler): the compiled row
    steps the compiled module, reports its warm-up (the compilation) apart, and the eager rows compile nothing."""
    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is the repository's, not an installed package
    from bench import gpu_check

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or model)
    rows = gpu_check.throughput("tiny", batch=2, steps=2, warmup=1, prefer="cpu", runs=gpu_check.RUNS[2:])
    assert [r["precision"] for r in rows] == ["bf16", "bf16+compile"] and len(compiled) == 1
    assert rows[0]["compile_s"] is None and rows[1]["compile_s"] > 0
    assert all(r["tokens_per_s"] > 0 and r["state_bytes"] is None for r in rows)


# ---------------------------------------------------------------- device-side clocks
class _Event:
    def __init__(self, t):
        self.t = t


def _fake_device_clock(monkeypatch, times):
    """CUDA events faked: each stamp takes the next device time from `times`; a collective's completion
    stamp is the time its fake work says it ended on the device."""
    ticks = iter(times)
    monkeypatch.setattr(cdist, "is_async", lambda d: True)
    monkeypatch.setattr(cdist, "stamp", lambda d: _Event(next(ticks)))
    monkeypatch.setattr(cdist, "seconds_between", lambda a, b: b.t - a.t)
    monkeypatch.setattr(cdist, "completion_stamp", lambda d, work: _Event(work.ends_at))
    monkeypatch.setattr(cdist, "synchronize", lambda d: None)


class _Work:
    ends_at = 14.0

    def wait(self):
        return True


@pytest.mark.parametrize("wait_in_hook,hidden", [(False, 0.995), (True, 0.005)])
def test_overlap_on_a_gpu_is_read_on_the_device_clock(monkeypatch, wait_in_hook, hidden):
    """On NCCL the host returns from a collective (and from work.wait()) at once; only device events say when
    it ran and when the compute stream stalled for it. Backward runs 11-15 on the device, the all-reduce
    12-14; waiting for it inside the hook stalls the compute stream 12.02-14: 0.01 s of 2 s was hidden."""
    import torch.distributed as dist

    from labs.instruments.collectives import CollectiveTimeline, overlap_fraction

    if wait_in_hook:  # origin, fwd end, launch, after call, wait start, wait end (stream resumes at 14), bwd end
        _fake_device_clock(monkeypatch, [10, 11, 12, 12.01, 12.02, 14.0, 15])
    else:  # origin, fwd end, launch, after call, bwd end, wait start, wait end
        _fake_device_clock(monkeypatch, [10, 11, 12, 12.01, 15, 15.5, 15.6])
    # the fake collective goes in before the timeline wraps it: monkeypatch puts the real one back afterwards
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, *a, **k: _Work())
    tl = CollectiveTimeline()
    try:
        tl.start(torch.device("cuda", 0))
        fwd_end = tl.now()
        work = dist.all_reduce(torch.zeros(4), async_op=True)
        if wait_in_hook:
            work.wait()
        bwd_end = tl.now()
        if not wait_in_hook:
            work.wait()
        spans = tl.stop()
    finally:
        tl.uninstall()
    assert spans[0].launch == 2 and spans[0].done == 4 and tl.seconds(fwd_end) == 1 and tl.seconds(bwd_end) == 5
    assert overlap_fraction(spans, [(tl.seconds(fwd_end), tl.seconds(bwd_end))]) == pytest.approx(hidden, abs=1e-6)


def test_sleep_stage_synchronises_the_device_around_each_timestamp(monkeypatch):
    """A received activation is on the GPU only once the stream has waited for it: the stage syncs the device
    before its start stamp and after its compute (forward and backward), so the host clock reads device time."""
    from labs.instruments import stage_probe

    order = []
    monkeypatch.setattr(stage_probe.cdist, "synchronize", lambda d: order.append("sync"))
    real = stage_probe.time.perf_counter
    monkeypatch.setattr(stage_probe.time, "perf_counter", lambda: order.append("clock") or real())
    stage = stage_probe.SleepStage(4, 0.0, 0.0)
    stage(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert order[:4] == ["sync", "clock", "sync", "clock"]  # forward: sync, start, (compute), sync, end
    assert order[4:] == ["sync", "clock", "sync", "clock"]  # backward marks: sync before each reading
    assert [e["kind"] for e in stage.events] == ["F", "B"]


# ---------------------------------------------------------------- make gpu-check: labs 9 and 10 on the GPUs at hand
@pytest.mark.parametrize("lab,left", [("lab9", {"cp_dp_equivalence", "cp_resume"}), ("lab10", {"ep_dp_grads"})])
@pytest.mark.parametrize("gpus,variant,only", [(1, None, None), (2, "1", True), (3, "1", True), (4, None, None),
                                               (8, None, None)])
def test_labs_9_and_10_are_planned_for_the_gpus_at_hand(monkeypatch, lab, left, gpus, variant, only):
    """One rank per GPU over NCCL: the checks whose runs fit the GPUs, every one from 4; on one GPU every rank over
    gloo, every check (the transfers gloo cannot carry are staged through host memory)."""
    from checker import labs

    monkeypatch.syspath_prepend(str(ROOT))  # bench/ is the repository's, not an installed package
    from bench.gpu_check import sharded_plan
    mod = labs.parent(lab)

    args, env, how, codes = sharded_plan(lab, [str(i) for i in range(gpus)])
    assert args[:5] == ["grade", lab, "--solutions", "--device", "cuda"] and codes == (0,)
    picked = [args[i + 1] for i, a in enumerate(args) if a == "--only"]
    assert (args[args.index("--variant") + 1] if "--variant" in args else None) == variant
    if gpus == 1:
        assert env["COURSE_BACKEND"] == "gloo" and "staged" in how and not picked
        assert int(env["COURSE_RANKS_PER_GPU"]) >= max(mod.ranks_needed(c.name) for c in mod.CHECKS)
    else:
        used = env["CUDA_VISIBLE_DEVICES"].split(",")
        assert "COURSE_BACKEND" not in env and len(used) == min(gpus, 4) - (gpus == 3)
        checks = picked or [c.name for c in mod.CHECKS]
        assert max(mod.ranks_needed(c, int(variant or 0)) for c in checks) <= len(used)
        if only:  # what does not fit is named, and everything that fits is graded
            assert left == {c.name for c in mod.CHECKS} - set(picked)
            assert all(name in how for name in left)


@pytest.mark.parametrize("rc,row", [(0, "| ok |"), (1, "| FAILED |")])
def test_gpu_check_grades_lab9_on_one_gpu_as_planned(monkeypatch, tmp_path, rc, row):
    """bench/gpu_check.py's lab 9 step on a faked one-GPU node: the checker command it runs, with what environment,
    and its row (every check passes: ok; a failure is FAILED)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import gpu_check

    monkeypatch.setattr(placement, "visible_gpus", lambda *a: ["0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ran = []
    report = {"checks": [{"name": "flash_equivalence", "passed": True, "value": 1e-6, "unit": "max abs diff"},
                         {"name": "ring_equivalence", "passed": rc == 0, "value": 1e-6, "unit": "max abs diff",
                          "message": "rank 1's rows differ"}]}

    def fake_checker(args, timeout, env=None):
        ran.append((args, env, timeout))
        return rc, "", 1.0, report
    monkeypatch.setattr(gpu_check, "_checker", fake_checker)
    out = tmp_path / "gpu.md"
    assert gpu_check.main(["--steps", "lab9", "--out", str(out)]) == (0 if rc == 0 else 1)
    (args, env, timeout), = ran
    assert args[:2] == ["grade", "lab9"] and env["COURSE_BACKEND"] == "gloo"
    assert timeout == gpu_check.STEP_LIMIT_S["lab9"]
    text = out.read_text()
    assert "lab9 grade, every rank on one GPU" in text and row in text
