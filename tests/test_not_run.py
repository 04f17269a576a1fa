"""Checks a machine cannot run are NOT RUN, set aside before the lab grades: each need's probe, and the
checks a lab declares against the machine it is graded on (checker/labs/_common.py, checker/cli.py)."""
from __future__ import annotations

import pytest

from checker import cli
from checker.labs import _common
from checker.labs._common import Check
from checker.labs.lab2 import checks as lab2
from checker.labs.lab3 import checks as lab3
from checker.labs.lab6 import checks as lab6
from checker.report import CheckResult


def test_cannot_run_names_each_missing_need_and_how_to_get_it(monkeypatch):
    monkeypatch.setattr(_common.os, "geteuid", lambda: 1000)
    monkeypatch.setitem(_common.NEEDS, "gpu", (lambda device: "no NVIDIA GPU on this machine", "grade on a GPU node"))
    checks = [Check("cpu_only", "w", "h"), Check("netns", "w", "h", needs=("root",)),
              Check("both", "w", "h", needs=("root", "gpu"))]
    got = _common.cannot_run(checks, "cpu")
    assert list(got) == ["netns", "both"] and all(r.not_run and not r.passed for r in got.values())
    assert got["netns"].message == "not run on this machine: not root (network namespaces need it)"
    assert "sudo" in got["netns"].hint
    assert "no NVIDIA GPU" in got["both"].message and "GPU node" in got["both"].hint and "sudo" in got["both"].hint


@pytest.mark.parametrize("backend, device, staged", [
    ("gloo", "cuda", True),    # two ranks sharing one GPU: gloo's reduce-scatter and send go through host memory
    ("", "cuda", False),       # NCCL: one rank per GPU, every collective
    ("gloo", "cpu", False),    # gloo on host memory: every collective
    ("gloo", "auto", None),    # auto: CUDA where a GPU is visible (decided below), else the CPU
])
def test_on_one_gpu_over_gloo_only_the_speed_ratios_of_staged_collectives_are_not_run(monkeypatch, backend, device,
                                                                                      staged):
    monkeypatch.setenv("COURSE_BACKEND", backend) if backend else monkeypatch.delenv("COURSE_BACKEND", raising=False)
    monkeypatch.delenv("COURSE_HOST_STAGING", raising=False)
    if staged is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # auto with no GPU visible: CPU tensors, gloo carries all
        assert not _common.cannot_run(lab3.CHECKS, device)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        staged = True
    lab3_off = _common.cannot_run(lab3.CHECKS, device)
    lab6_off = _common.cannot_run(lab6.CHECKS, device)
    assert not _common.cannot_run(lab2.CHECKS, device)  # DDP: all-reduce only, gloo moves it itself
    assert not lab6_off  # pipelines: sends staged through host memory (labs/common/staging.py), every check runs
    if not staged:
        assert not lab3_off
        return
    # ZeRO-2, FSDP2, DeepSpeed, DCP run on staged collectives (tests/test_staging.py: every such check passes on a
    # fake of gloo on a GPU); the two ratios against DDP would time the staging copies
    assert set(lab3_off) == {"throughput", "zero2_throughput"}
    r = lab3_off["zero2_throughput"]
    assert r.not_run and "staged through host memory" in r.message and "two ranks on one GPU" in r.message
    assert "NCCL" in r.hint and "--device cpu" in r.hint


def test_staging_asked_for_on_the_cpu_sets_the_same_speed_checks_aside(monkeypatch):
    monkeypatch.delenv("COURSE_BACKEND", raising=False)
    monkeypatch.setenv("COURSE_HOST_STAGING", "1")
    off = _common.cannot_run(lab3.CHECKS, "cpu")
    assert set(off) == {"throughput", "zero2_throughput"} and "COURSE_HOST_STAGING=1" in off["throughput"].message


class _Lab:
    """A lab module that records which checks it was asked to grade."""
    CHECKS = [Check("runs_here", "w", "h"), Check("needs_root", "w", "h", needs=("root",)),
              Check("also_here", "w", "h")]

    def __init__(self):
        self.asked = None

    def grade(self, h, checks):
        self.asked = [c.name for c in checks]
        return [CheckResult(c.name, True) for c in reversed(checks)], [("info", "x")]


class _H:
    device = "cpu"


def test_the_lab_grades_only_what_can_run_and_the_report_keeps_the_lab_s_order(monkeypatch):
    monkeypatch.setattr(_common.os, "geteuid", lambda: 1000)
    lab = _Lab()
    results, info = cli._grade_runnable(lab, _H(), lab.CHECKS)
    assert lab.asked == ["runs_here", "also_here"]
    assert [r.name for r in results] == ["runs_here", "needs_root", "also_here"]
    assert [r.status for r in results] == ["pass", "not_run", "pass"] and info == [("info", "x")]


def test_a_lab_with_nothing_it_can_run_starts_nothing(monkeypatch):
    monkeypatch.setattr(_common.os, "geteuid", lambda: 1000)
    lab = _Lab()
    results, info = cli._grade_runnable(lab, _H(), [lab.CHECKS[1]])
    assert lab.asked is None and [r.status for r in results] == ["not_run"] and info == []
