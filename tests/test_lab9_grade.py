"""Lab 9: the reference against torch's attention (one process, and 2-3 ranks through the course's own launcher),
the checker's byte formulas against the checker's own measurement of the reference, and a grade at a hidden
variant (3 ranks). (The reference passing and the starter failing are in tests/test_grades.py; one mutant per check
in tests/mutants/lab9.py.) All of it is in make test-exhaustive: make test grades the reference and one mutant."""
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from checker.labs.lab9 import checks, formulas, measure, plan
from conftest import ROOT, load_json, run_checker
from solutions.lab9_long_context import flash_attention, zigzag_shard
from solutions.lab9_long_context.flash import attend, merge, naive_attention
from solutions.lab9_long_context.zigzag import causal_pairs, positions

pytestmark = pytest.mark.exhaustive


def _grads(fn, q, k, v, g):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    return [out, *torch.autograd.grad(out, leaves, g)]


@pytest.mark.parametrize("b,h,s,d,causal,bq,bk", [(2, 2, 37, 16, False, 16, 16), (1, 3, 49, 8, True, 16, 8),
                                                  (1, 1, 1, 4, True, 8, 8), (2, 2, 64, 8, True, 32, 32),
                                                  (1, 2, 33, 8, True, 7, 5)])
def test_flash_equals_sdpa_in_values_and_gradients(b, h, s, d, causal, bq, bk):
    torch.manual_seed(s)
    q, k, v, g = (torch.randn(b, h, s, d) for _ in range(4))
    got = _grads(lambda *t: flash_attention(*t, causal=causal, block_q=bq, block_k=bk), q, k, v, g)
    want = _grads(lambda *t: F.scaled_dot_product_attention(*t, is_causal=causal), q, k, v, g)
    assert max((a - w).abs().max().item() for a, w in zip(got, want)) <= checks.TOL


def test_flash_with_fewer_keys_than_queries():
    torch.manual_seed(0)
    q, g = torch.randn(1, 2, 20, 8), torch.randn(1, 2, 20, 8)
    k, v = torch.randn(1, 2, 13, 8), torch.randn(1, 2, 13, 8)
    got = _grads(lambda *t: flash_attention(*t, block_q=8, block_k=8), q, k, v, g)
    want = _grads(lambda *t: F.scaled_dot_product_attention(*t), q, k, v, g)
    assert max((a - w).abs().max().item() for a, w in zip(got, want)) <= checks.TOL


def test_merge_of_two_key_sets_is_attention_over_both_and_an_empty_side_is_neutral():
    """The ring's rule: attention over keys A and B = merge of attention over A and over B, by log-sum-exp; a
    block wholly in the queries' future (lse -inf everywhere) changes nothing."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 24, 8) for _ in range(3))
    pos = torch.arange(24)
    whole = attend(q, k, v, pos, pos, True, 8, 8)
    a = attend(q, k[:, :, :10], v[:, :, :10], pos, pos[:10], True, 8, 8)
    b = attend(q, k[:, :, 10:], v[:, :, 10:], pos, pos[10:], True, 8, 8)
    for x, y in zip(merge(*a, *b), whole):
        assert (x - y).abs().max().item() <= 1e-6
    future = attend(q[:, :, :8], k[:, :, 16:], v[:, :, 16:], pos[:8], pos[16:], True, 8, 8)
    assert torch.isinf(future[1]).all() and (future[0] == 0).all()
    early = attend(q[:, :, :8], k, v, pos[:8], pos, True, 8, 8)
    for x, y in zip(merge(*early, *future), early):
        assert torch.equal(x, y)


@pytest.mark.parametrize("causal", [False, True])
def test_the_checkers_measurement_of_the_reference_is_the_formula_and_naive_keeps_s_squared(causal):
    b, h, s, d = 1, 2, 128, 16
    inputs = [torch.randn(b, h, s, d, requires_grad=True) for _ in range(3)]
    kept, largest, _ = measure.kept_bytes(lambda *t: flash_attention(*t, causal=causal), inputs)
    assert kept == formulas.flash_bytes(b, h, s, d) and largest < 4 * b * h * s * s
    naive, largest, _ = measure.kept_bytes(lambda *t: naive_attention(*t, causal=causal), inputs)
    assert largest >= 4 * b * h * s * s and naive > 3 * kept


@pytest.mark.parametrize("world", [2, 3, 4])
def test_zigzag_holds_chunks_r_and_2n_1_r_and_evens_the_causal_pairs(world):
    s = 4 * world
    x = torch.arange(s).view(1, 1, s, 1)
    parts = [zigzag_shard(x, r, world).flatten().tolist() for r in range(world)]
    assert sorted(sum(parts, [])) == list(range(s))
    assert parts[0][:2] == [0, 1] and parts[0][2:] == [s - 2, s - 1]
    assert [positions(s, r, world, "zigzag").tolist() for r in range(world)] == parts
    assert len(set(causal_pairs(s, world, "zigzag"))) == 1
    plain = causal_pairs(s, world, "contiguous")
    assert plain == sorted(plain) and plain[-1] > 2 * plain[0]


def test_the_flop_counter_sees_matmuls_and_sdpa():
    counter = measure.FlopCounter()
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
    q = torch.randn(1, 2, 8, 4)
    with counter.mode:
        a @ b
        F.scaled_dot_product_attention(q, q, q)
    assert counter.flops == 2 * 3 * 4 * 5 * 6 + 4 * 2 * 8 * 8 * 4


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("module,nproc", [("ring", 2), ("ring", 3), ("ulysses", 2)])
def test_the_scripts_equal_full_attention_on_every_rank(module, nproc):
    """The commands in each script's docstring, through the course's launcher (a free port, no torchrun agent)."""
    r = subprocess.run([sys.executable, "-m", "checker.spawn", f"--nproc={nproc}", "--", sys.executable, "-m",
                        f"solutions.lab9_long_context.{module}"], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    diffs = [float(x) for x in re.findall(r"rows ([0-9.e+-]+)", r.stdout)]
    assert len(diffs) == nproc * (2 if module == "ring" else 1) and max(diffs) <= checks.TOL, r.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_hidden_variant_at_two_ranks_passes(tmp_path):
    """The public grade runs the ring at 3 ranks (at 2 the next and previous ranks coincide); odd variants at 2."""
    assert (plan.world_size(0), plan.world_size(1)) == (3, 2)
    r = run_checker("grade", "lab9", "--solutions", "--variant", "1", "--json", tmp_path / "r.json")
    rep = load_json(tmp_path / "r.json")
    assert r.returncode == 0 and rep["passed"], r.stdout
    assert rep["seconds"] <= plan.GRADE_SECONDS


class _Held(Exception):
    pass


@pytest.mark.parametrize("atomic", [True, False])
def test_a_held_write_leaves_half_a_file_and_only_an_atomic_save_keeps_the_last_checkpoint(tmp_path, atomic):
    """cp_resume's kill inside a write: the checker's torch.save, once armed, puts half the bytes on disk and stops.
    After it, an atomic save's target still loads as the previous checkpoint; a plain torch.save's does not load."""
    from checker.labs._held_save import HeldSave
    from checker.labs.lab9.shapes import KILL
    from labs.common import checkpoint as ckpt

    class Ctx:
        workdir = tmp_path

        def write(self, result):
            pass

    path = tmp_path / "state.pt"
    save, out = torch.save, {}
    held = HeldSave(Ctx(), out, together=False, cue=KILL)  # as lab 9's resume.py installs it

    def hold():  # the held rank cues the kill, then the harness's SIGKILL would land: here, leave the save
        raise _Held(held.cue)
    held._hold = hold
    try:
        ckpt.atomic_save({"step": 3, "w": torch.ones(1000)}, path)
        held.armed = True
        with pytest.raises(_Held, match=KILL):
            (ckpt.atomic_save if atomic else torch.save)({"step": 5, "w": torch.zeros(1000)}, path)
    finally:
        held.uninstall()
    assert torch.save is save and out["held"] and out["held_path"]
    if atomic:
        assert ckpt.load(path)["step"] == 3
    else:
        assert 0 < path.stat().st_size < 4000
        with pytest.raises(RuntimeError, match="zip archive"):  # torch.load of a torn file
            ckpt.load(path)
