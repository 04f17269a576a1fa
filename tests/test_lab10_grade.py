"""Lab 10: the reference against the checker's own reference (checker/labs/lab10/ref.py, written in another form),
the checker's byte formula against the bytes counted beneath the reference on 2 and 4 ranks, the EP x DP script,
and a grade at a hidden variant. (The reference passing and the starter failing are in tests/test_grades.py; the
mutants in tests/mutants/lab10.py.) All of it is in make test-exhaustive but the counter's uneven all-to-all."""
import re
import subprocess
import sys

import pytest
import torch

from checker.labs.lab10 import checks, plan
from checker.labs.lab10 import ref as checker_ref
from conftest import ROOT, first_in_make_test, load_json, run_checker
from solutions.lab10_moe import MoE, capacity, keep_mask, load_balancing_loss, route, update_bias


@pytest.mark.exhaustive
@pytest.mark.parametrize("T,E,k", [(40, 6, 2), (33, 8, 3), (17, 4, 1), (5, 5, 5)])
def test_route_equals_the_checkers_routing_with_ties_and_a_bias(T, E, k):
    torch.manual_seed(T)
    scores = torch.randn(T, E)
    scores[0] = 0.0
    scores[1, :3] = 4.0
    for bias in (None, torch.randn(E) * 0.1):
        ids, w = route(scores, k, bias)
        assert ids.tolist() == checker_ref.choose(torch.softmax(scores, -1), k, bias)
        G, ref_ids, _, _ = checker_ref.gate(scores, k, float(E), bias)
        want = torch.stack([G[t, row] for t, row in enumerate(ref_ids)])
        assert (w - want).abs().max().item() <= 1e-6 and w.dtype == torch.float32


@pytest.mark.exhaustive
@pytest.mark.parametrize("factor", [0.5, 1.0, 1.25])
def test_keep_mask_is_the_rule_walked_token_by_token(factor):
    torch.manual_seed(1)
    ids, _ = route(torch.randn(97, 8) + torch.linspace(2, 0, 8), 3)
    cap = capacity(97, 3, 8, factor)
    assert cap == checker_ref.capacity(97, 3, 8, factor)
    assert keep_mask(ids, 8, cap).tolist() == checker_ref.keep(ids.tolist(), 8, cap)


@pytest.mark.exhaustive
def test_the_aux_loss_is_one_when_even_and_e_over_k_when_collapsed():
    T, E, k = 64, 8, 2
    even = torch.zeros(T, E)
    ids = torch.arange(T * k).view(T, k) % E
    assert load_balancing_loss(torch.softmax(even, -1), ids, E).item() == pytest.approx(1.0)
    collapsed = torch.full((T, E), -30.0)
    collapsed[:, :k] = 0.0
    ids, _ = route(collapsed, k)
    assert load_balancing_loss(torch.softmax(collapsed, -1), ids, E).item() == pytest.approx(E / k, rel=1e-5)
    probs = torch.softmax(torch.randn(T, E), -1)
    ids, _ = route(probs.log(), k)
    assert load_balancing_loss(probs, ids, E).item() == pytest.approx(checker_ref.aux_loss(probs, ids.tolist()).item())


@pytest.mark.exhaustive
def test_the_layer_equals_the_dense_reference_with_drops_in_values_and_gradients():
    gen = torch.Generator().manual_seed(3)
    ref = checker_ref.RefMoE.make(16, 6, 2, 24, 1.0, gen)
    ref.bias.copy_(torch.randn(6, generator=gen) * 0.05)
    m = MoE(16, 6, 2, 24, 1.0)
    m.load_state_dict(ref.state_dict())
    x = torch.randn(3, 14, 16, generator=gen)
    outs = []
    for layer in (m, ref):
        xl = x.clone().requires_grad_()
        y = layer(xl)
        y.pow(2).sum().backward()
        outs.append([y, xl.grad, layer.router.weight.grad, layer.w1.grad, layer.w2.grad])
    assert max((a - b).abs().max().item() for a, b in zip(*outs)) <= checks.TOL
    assert m.counts.tolist() == ref.counts.tolist() and float(m.aux_loss) == pytest.approx(float(ref.aux_loss))
    kept = keep_mask(*route(x.view(-1, 16) @ ref.router.weight.t(), 2, ref.bias)[:1], 6, capacity(42, 2, 6, 1.0))
    assert not kept.all()  # the comparison covered dropped choices


@pytest.mark.exhaustive
def test_update_bias_moves_by_gamma_toward_the_mean():
    bias = torch.zeros(4)
    update_bias(bias, torch.tensor([10, 2, 6, 6]), 0.5)  # mean 6
    assert bias.tolist() == [-0.5, 0.5, 0.0, 0.0]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nproc", first_in_make_test([2, 4]))
def test_the_ep_script_equals_one_process_and_its_bytes_the_prediction(nproc):
    """Uneven all-to-alls counted exactly (labs/instruments/comm_bytes.py): what leaves a rank is its input minus
    its own split; the counts add E int64 * (N-1)/N."""
    r = subprocess.run([sys.executable, "-m", "checker.spawn", f"--nproc={nproc}", "--", sys.executable, "-m",
                        "solutions.lab10_moe.expert_parallel"], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = re.findall(r"process ([0-9.e+-]+); sent ([\d,]+) B forward, predicted ([\d,]+) B", r.stdout)
    assert len(rows) == nproc, r.stdout
    counts = 8 * 2 * nproc * (nproc - 1) / nproc
    for diff, sent, predicted in rows:
        assert float(diff) <= checks.TOL
        assert int(sent.replace(",", "")) == int(predicted.replace(",", "")) + counts


@pytest.mark.exhaustive
@pytest.mark.timeout(120)
def test_the_ep_dp_script_trains_and_keeps_the_biases_equal():
    r = subprocess.run([sys.executable, "-m", "checker.spawn", "--nproc=4", "--", sys.executable, "-m",
                        "solutions.lab10_moe.ep_step"], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    losses = [float(x) for x in re.findall(r"loss ([0-9.]+)", r.stdout)]
    assert len(losses) == 5 and losses[-1] < losses[0], r.stdout


@pytest.mark.exhaustive
@pytest.mark.timeout(180)
def test_a_hidden_variant_at_two_ranks_with_top_1_passes(tmp_path):
    assert (plan.world_size(0), plan.world_size(1)) == (3, 2)
    r = run_checker("grade", "lab10", "--solutions", "--variant", "1", "--json", tmp_path / "r.json")
    rep = load_json(tmp_path / "r.json")
    assert r.returncode == 0 and rep["passed"], r.stdout
    assert rep["seconds"] <= plan.GRADE_SECONDS


def test_the_last_complete_checkpoint_is_the_first_when_the_second_write_was_held():
    """checker/labs/_held_save.py's reading of a killed run, shared by the resume checks of labs 1, 2, 3 and 10."""
    from checker.labs._held_save import last_complete, wrong_start

    assert last_complete([{"complete_at": 3, "held": False}, {"complete_at": 3, "held": True}]) == (3, True)
    assert last_complete([{"complete_at": 3}]) == (5, False)  # nothing held: killed after the second save
    assert wrong_start(3, True, [3]) is None and wrong_start(3, True, 3) is None
    msg = wrong_start(3, True, [5, 5])
    assert "last complete checkpoint is step 3" in msg and "step 5 was killed half-written" in msg
    assert wrong_start(5, False, 6, "load_sharded").endswith("load_sharded returned step 6")


@pytest.mark.exhaustive  # ~25 s: the units run and the EP run, then their reference runs
@pytest.mark.timeout(240)
def test_the_compared_values_do_not_depend_on_torchs_global_random_stream(lab_tree):
    """The learner's run and the reference's (units@ref, ep@ref) must draw every input and upstream gradient alike:
    a tree whose labs/__init__.py (it runs before the checker's truths are taken) draws from torch's global stream
    must still pass. (An upstream gradient drawn with randn_like did not: a correct MoE failed moe_equivalence and
    ep_equivalence by 1.5-2.5 in a learner's process whose global stream stood elsewhere.)"""
    tree = lab_tree("lab10_moe")
    init = tree / "labs" / "__init__.py"
    init.write_text(init.read_text() + "\nimport torch as _torch\n_torch.rand(1234)\n")
    r = run_checker("grade", "lab10", "--root", tree, "--only", "moe_equivalence", "--only", "ep_equivalence",
                    "--json", tree / "r.json")
    checks_ = {c["name"]: c for c in load_json(tree / "r.json")["checks"]}
    assert r.returncode == 0 and all(c["passed"] for c in checks_.values()), checks_
