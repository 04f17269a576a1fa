"""checker/labs/_crosscheck.py: what the reference's own run counts as a difference, and when the parent turns a
PASS into a FAIL."""
from pathlib import Path

import torch

from checker.labs import _crosscheck
from checker.labs._common import Check
from checker.report import CheckResult
from checker.run import Run


class Ctx:
    def __init__(self, workdir: Path, run: str, twin_of=None):
        self.workdir, self.run, self.rank, self.twin_of, self.crosscheck = workdir, run, 0, twin_of, {}


def _judged(tmp_path, mine, ref, **tol):
    _crosscheck.keep(Ctx(tmp_path, "correctness"), "c", "k", mine)
    twin = Ctx(tmp_path, "correctness@ref", twin_of="correctness")
    _crosscheck.keep(twin, "c", "k", ref, **tol)
    return twin.crosscheck["c"][0]


def test_values_within_tolerance_pass_and_beyond_it_do_not(tmp_path):
    ref = [torch.ones(3), 2.0]
    near = _judged(tmp_path, [torch.ones(3) + 1e-7, 2.0], ref, atol=1e-6)
    assert near["problem"] == "" and near["gap"] <= near["tol"]
    far = _judged(tmp_path, [torch.ones(3) + 1e-3, 2.0], ref, atol=1e-6)
    assert far["gap"] > far["tol"]


def test_shape_count_and_non_finite_differences_are_problems(tmp_path):
    assert "shape" in _judged(tmp_path, [torch.ones(4)], [torch.ones(3)])["problem"]
    assert "values kept" in _judged(tmp_path, [torch.ones(3)], [torch.ones(3), torch.ones(1)])["problem"]
    assert "not finite" in _judged(tmp_path, [torch.tensor([float("nan"), 1.0])], [torch.ones(2)])["problem"]


def test_a_kept_file_that_holds_no_numbers_is_a_problem_not_a_crash(tmp_path):
    twin = Ctx(tmp_path, "correctness@ref", twin_of="correctness")
    folder = tmp_path / "kept" / "correctness"
    folder.mkdir(parents=True)
    torch.save([None, "x"], folder / "c.k.rank0.pt")  # what a learner's run may leave in its place
    _crosscheck.keep(twin, "c", "k", [torch.ones(1), torch.ones(1)])
    assert "not numbers" in twin.crosscheck["c"][0]["problem"]


def test_a_key_the_learners_run_never_kept_is_a_problem(tmp_path):
    twin = Ctx(tmp_path, "correctness@ref", twin_of="correctness")
    _crosscheck.keep(twin, "c", "missing", torch.ones(2))
    assert twin.crosscheck["c"][0]["problem"] == "not kept by your run"


def _runs(notes):
    return {"correctness@ref": Run("correctness@ref", 0, 1.0, results=[{"crosscheck": {"c": notes}}])}


def test_judge_fails_a_pass_only_when_the_reference_disagrees_or_nothing_was_kept():
    c = Check("c", "", "", runs=frozenset({"correctness"}), crosscheck=True)
    ok = CheckResult("c", True, message="equal in your run")
    good = {"key": "k", "rank": 0, "gap": 0.0, "tol": 1e-6, "problem": ""}
    bad = {**good, "gap": 1.0}
    assert _crosscheck.judge(c, _runs([good]), ok).passed
    failed = _crosscheck.judge(c, _runs([good, bad]), ok)
    assert not failed.passed and "1 of 2 values differ" in failed.message and "equal in your run" in failed.message
    assert not _crosscheck.judge(c, _runs([]), ok).passed
    # a FAIL stays the learner's own message; a check not declared crosscheck is left alone
    assert _crosscheck.judge(c, _runs([bad]), CheckResult("c", False, message="own")).message == "own"
    plain = Check("c", "", "", runs=frozenset({"correctness"}))
    assert _crosscheck.judge(plain, _runs([bad]), ok).passed


def test_a_pass_with_no_reference_run_is_not_a_pass():
    c = Check("c", "", "", runs=frozenset({"correctness"}), crosscheck=True)
    got = _crosscheck.judge(c, {"correctness": Run("correctness", 0, 1.0)}, CheckResult("c", True))
    assert not got.passed and "did not run" in got.message


def test_the_reference_runs_only_where_a_crosschecked_check_passed():
    """A wrong answer (or a starter, or a mutant) costs no reference run; a pass starts one per compared run."""
    from checker.labs._common import declare

    registry = []
    check = declare(registry)
    check("good", "", "", runs={"a"}, crosscheck=True)(lambda c, runs: CheckResult(c.name, True))
    check("bad", "", "", runs={"b"}, crosscheck=True)(lambda c, runs: CheckResult(c.name, False))
    check("plain", "", "", runs={"c"})(lambda c, runs: CheckResult(c.name, True))
    started = []

    class H:
        def run_many(self, specs, parallel):
            started.extend(specs)
            return {s["name"]: None for s in specs}

    phases = [[dict(name=n, task=n, budget_s=1, crosscheck=True, args={"x": 1}) for n in "abc"]]
    runs = {n: Run(n, 0, 1.0) for n in "abc"}
    got = _crosscheck.second_opinion(H(), registry, runs, phases)
    assert list(got) == ["a@ref"] and started[0]["target"] == "solutions"
    assert started[0]["args"] == {"x": 1, "twin_of": "a"}


def test_a_run_launched_its_own_way_names_how_its_reference_run_starts_and_its_context_reaches_the_evaluator():
    """Lab 8's nodes run starts under the learner's torchrun options in two namespaces (an argv, no task): its spec's
    "twin" says how the reference's run of the same task starts (4 ranks on loopback), and the evaluators that decide
    whether one is needed read the grade's context."""
    from checker.labs._common import declare

    registry, seen = [], []
    check = declare(registry)
    check("eq", "", "", runs={"nodes"}, crosscheck=True)(
        lambda c, runs, ctx: seen.append(ctx) or CheckResult(c.name, True))

    class H:
        def run_many(self, specs, parallel):
            self.specs = specs
            return {s["name"]: None for s in specs}

    h = H()
    spec = dict(name="nodes", task="", nproc=4, budget_s=9, argv=["agents"], crosscheck=True,
                twin=dict(task="nodes", nproc=4, args={"link_ifs": ["lo", "lo"]}))
    assert list(_crosscheck.second_opinion(h, registry, {"nodes": Run("nodes", 0, 1.0)}, [[spec]], {"link": 1})) \
        == ["nodes@ref"]
    (twin,) = h.specs
    assert seen == [{"link": 1}] and "argv" not in twin
    assert twin["task"] == "nodes" and twin["args"] == {"link_ifs": ["lo", "lo"], "twin_of": "nodes"}
