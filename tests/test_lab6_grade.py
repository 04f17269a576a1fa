"""End to end, lab 6 at world size 2: each classic model-parallel mistake fails the check meant to catch it.
(The reference passing and the starter failing are in tests/test_grades.py.)"""
import pytest

from conftest import first_in_make_test, load_json, run_checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _grade(out_dir, *args):
    r = run_checker("grade", "lab6", "--json", out_dir / "report.json", *args)
    return r, {c["name"]: c for c in load_json(out_dir / "report.json")["checks"]}


MISTAKES = {  # name: ([(check that must fail, text its message must hold), ...], [(file, old, new), ...])
    # f's backward left as the identity: the forward is right, the LayerNorms and embeddings get a partial gradient
    "f_backward_not_reduced": ([("tp_equivalence", "by hand: logits")], [
        ("tp_layers.py", "        dist.all_reduce(grad, group=ctx.group)\n", "")]),
    # two independent mistakes in one tree (one run instead of two; each check's message names its own):
    # the full Linear kept as a submodule "for later", so every rank still holds all of it; and g's backward
    # all-reducing too (it should be the identity): 4 all-reduces per block in backward instead of 2
    "layer_kept_and_g_reduced": ([("tp_memory", "expected 99,712 B"), ("tp_comm", "backward [4, 4]")], [
        ("tp_layers.py", "        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())\n",
         "        self.full = linear\n        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())\n"),
        ("tp_layers.py", "        return grad, None\n        # END SOLUTION\n\n\ndef copy_to_tp",  # g's backward
         "        grad = grad.clone()\n        dist.all_reduce(grad)\n        return grad, None\n"
         "        # END SOLUTION\n\n\ndef copy_to_tp")]),
    # each micro-batch's loss backpropagated unscaled: the gradient is m times the batch's
    "loss_not_divided_by_m": ([("pp_equivalence", "GPipe")], [
        ("schedules.py", "            out = loss / self.m", "            out = loss")]),
    # the two orders confused: "GPipe" finishes each micro-batch before the next (no pipelining: bubble 1/2),
    # "1F1B" warms up with every micro-batch (that is GPipe: all m activations held)
    "schedules_confused": ([("pp_bubble", "GPipe m=4 0.5"), ("pp_1f1b_memory", "1F1B [8, 8]")], [
        ("schedules.py", "        pipe.forward(i)\n    for i in range(pipe.m):\n        pipe.backward(i)\n",
         "        pipe.forward(i)\n        pipe.backward(i)\n"),
        ("schedules.py", "    warmup = min(pipe.p - 1 - pipe.rank, pipe.m)", "    warmup = pipe.m")]),
}


@pytest.mark.parametrize("mistake", first_in_make_test(sorted(MISTAKES)))
def test_each_mistake_fails_its_check(lab_tree, mistake):
    fails, edits = MISTAKES[mistake]
    tree = lab_tree("lab6_model_parallel")
    for rel, old, new in edits:
        p = tree / "labs" / "lab6_model_parallel" / rel
        assert p.read_text().count(old) == 1, (rel, old)  # one edit: an anchor met twice edits both
        p.write_text(p.read_text().replace(old, new))
    r, checks = _grade(tree, "--root", tree, *(a for check, _ in fails for a in ("--only", check)))
    assert r.returncode == 1, r.stdout
    for check, needle in fails:
        assert not checks[check]["passed"] and needle in checks[check]["message"], checks[check]
