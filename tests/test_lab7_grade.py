"""Lab 7: the estimator's derivation against measurement (fast), the checker's formulas against the reference, and
end to end, classic memory mistakes failing the check meant to catch them. (The reference passing and the starter
failing are in tests/test_grades.py; one mutant per check in tests/mutants/lab7.py.)"""
import dataclasses

import pytest
import torch

from checker.labs.lab7.checks import expected_bytes, reference_plan
from checker.labs.lab7.setup import PLAN
from conftest import load_json, run_checker
from labs.common.model import Block, get_config
from solutions.lab7_memory import activation_bytes, plan_memory, saved_bytes

SHAPES = [(64, 4, 2, 64, 0.1), (96, 3, 3, 40, 0.1), (48, 2, 4, 24, 0.0), (64, 2, 1, 16, 0.0)]


def _cfg(h, a, p):
    return dataclasses.replace(get_config("tiny"), n_embd=h, n_head=a, dropout=p)


@pytest.mark.parametrize("h,a,b,s,p", SHAPES)
def test_estimate_equals_the_saved_tensors_of_one_block(h, a, b, s, p):
    """saved_tensors_hooks, deduplicated by storage, sees exactly the derivation's bytes (fp32 and bf16)."""
    cfg = _cfg(h, a, p)
    torch.manual_seed(0)
    block = Block(cfg).train()
    for precision, ctx in (("fp32", torch.autocast("cpu", enabled=False)), ("bf16", torch.autocast("cpu"))):
        with ctx:
            _, got = saved_bytes(block, torch.randn(b, s, h, requires_grad=True))
        assert got["bytes"] == activation_bytes(cfg, b, s, precision), (precision, got["tensors"])


def test_megatron_anchor_and_what_this_model_adds():
    """16-bit activations, 1-byte masks: 34 bsh + 5 abs^2 (Korthikanti et al.). The fp32 CPU count differs by the
    float masks, the fp32 attention and LayerNorm's statistics; the derivation names each."""
    from solutions.lab7_memory.activations import megatron_bytes

    b, s, h, a = 2, 64, 64, 4
    assert megatron_bytes(b, s, h, a) == s * b * h * (34 + 5 * a * s // h)
    assert activation_bytes(_cfg(h, a, 0.1), b, s) == 72 * b * s * h + 12 * a * b * s * s + 16 * b * s


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_the_checkers_formula_is_the_references(precision, recompute):
    for h, a, b, s, p in SHAPES:
        assert expected_bytes(h, a, b, s, p, precision, recompute) == \
            activation_bytes(_cfg(h, a, p), b, s, precision, recompute)


def test_reference_planner_matches_the_checkers_and_fits():
    cfg, p = get_config(PLAN["config"]), PLAN
    for gib in (200, 80, 24, 16, 8, 6, 4, 2, 1, 0.5):
        plan = plan_memory(cfg, p["n_params"], p["batch"], p["seq"], p["world_size"], int(gib * 2 ** 30))
        want = reference_plan(int(gib * 2 ** 30))
        assert {k: plan[k] for k in want} == want
        assert plan["total"] == sum(plan["bytes"].values()) and plan["fits"] == (plan["total"] <= gib * 2 ** 30)


MISTAKES = {  # name: ([(check that must fail, text its message must hold), ...], [(file, old, new), ...])
    # two slips in one tree: the estimator counts the attention's a*s^2 tensors in 16 bits (Megatron's number, not
    # this CPU's), and the loss scaler grows the scale after an overflow instead of halving it
    "megatron_bytes_and_scale_grows": ([("activation_estimate", "off by -"), ("loss_scaling", "expected half")], [
        ("activations.py", "= 3 * FP32 * b * a * s * s", "= 3 * 2 * b * a * s * s"),
        ("loss_scale.py", "            self._scale *= self.backoff_factor\n",
         "            self._scale *= self.growth_factor\n")]),
}


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_fails_its_check(lab_tree, mistake):
    fails, edits = MISTAKES[mistake]
    tree = lab_tree("lab7_memory")
    for rel, old, new in edits:
        p = tree / "labs" / "lab7_memory" / rel
        assert p.read_text().count(old) == 1, (rel, old)  # one edit: an anchor met twice edits both
        p.write_text(p.read_text().replace(old, new))
    r = run_checker("grade", "lab7", "--json", tree / "report.json", "--root", tree,
                    *(a for check, _ in fails for a in ("--only", check)))
    checks = {c["name"]: c for c in load_json(tree / "report.json")["checks"]}
    assert r.returncode == 1, r.stdout
    for check, needle in fails:
        assert not checks[check]["passed"] and needle in checks[check]["message"], checks[check]
