"""Lab 6 without processes: the checker's pipeline arithmetic on ideal timelines, and its TP layout and byte
formula against the model's own tensors and the reference layout."""
import dataclasses

import pytest

from checker.labs.lab6.checks import replayed_bubble, tp_expected_bytes
from checker.labs.lab6.tasks import _expected_shard
from labs.instruments.schedule_timeline import bubble_fraction, ideal_bubble, peak_live


def _ideal(order_of, p, m, tf=1.0, tb=2.0):
    """Each stage's events when every op takes exactly tf / tb and starts as soon as its inputs exist."""
    done, free, ranks = {}, [0.0] * p, [[] for _ in range(p)]
    pending = [list(order_of(s, p, m)) for s in range(p)]
    while any(pending):
        for s in range(p):
            while pending[s]:
                kind, i = pending[s][0]
                if kind == "F":
                    dep = ("F", s - 1, i) if s else None
                else:
                    dep = ("B", s + 1, i) if s < p - 1 else ("F", s, i)
                if dep and dep not in done:
                    break
                start = max(free[s], done.get(dep, 0.0))
                free[s] = done[(kind, s, i)] = start + (tf if kind == "F" else tb)
                ranks[s].append({"kind": kind, "mb": i, "start": start, "end": free[s]})
                pending[s].pop(0)
    return ranks


def _gpipe(s, p, m):
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def _1f1b(s, p, m):
    w = min(p - 1 - s, m)
    steady = [op for i in range(m - w) for op in (("F", w + i), ("B", i))]
    return [("F", i) for i in range(w)] + steady + [("B", i) for i in range(m - w, m)]


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (2, 8), (4, 8)])
def test_ideal_schedules_have_the_formulas_bubble_and_1f1b_holds_p_minus_stage(p, m):
    for order in (_gpipe, _1f1b):
        assert bubble_fraction(_ideal(order, p, m)) == pytest.approx(ideal_bubble(p, m))
    assert [peak_live(e) for e in _ideal(_gpipe, p, m)] == [m] * p
    assert [peak_live(e) for e in _ideal(_1f1b, p, m)] == [min(p - s, m) for s in range(p)]


def _with_gaps(ranks, gap):
    """The same events, each stage's k-th operation started k*gap later: time lost between operations (send/recv,
    Python, a loaded CPU), the order unchanged."""
    return [[{**e, "start": e["start"] + k * gap, "end": e["end"] + k * gap} for k, e in enumerate(r)] for r in ranks]


@pytest.mark.parametrize("p,m", [(2, 4), (2, 8), (4, 8)])
def test_the_replayed_bubble_is_the_schedules_own_and_ignores_gaps_between_operations(p, m):
    for order in (_gpipe, _1f1b):
        ideal = _ideal(order, p, m)
        assert replayed_bubble(ideal) == pytest.approx(ideal_bubble(p, m))
        gappy = _with_gaps(ideal, 0.2)
        assert bubble_fraction(gappy) > ideal_bubble(p, m) + 0.05  # the wall clock pays for the gaps
        assert replayed_bubble(gappy) == pytest.approx(ideal_bubble(p, m))  # the schedule does not
    # each micro-batch's backward before the next forward: no pipelining, and the replay says so
    serial = _ideal(lambda s, p, m: [op for i in range(m) for op in (("F", i), ("B", i))], p, m)
    assert replayed_bubble(serial) == pytest.approx(bubble_fraction(serial)) and replayed_bubble(serial) > 0.4


@pytest.mark.parametrize("world", [2, 4])
def test_byte_formula_and_qkv_layout_match_the_model_and_the_reference(world):
    import torch
    import torch.distributed as dist

    from labs.common.model import build_model, get_config
    from solutions.lab6_model_parallel.tensor_parallel import qkv_rows

    cfg = dataclasses.replace(get_config("tiny"), dropout=0.0)
    block = build_model(cfg).blocks[0]
    split = [block.attn.qkv, block.attn.proj, block.mlp.fc, block.mlp.proj]
    weights = sum(m.weight.numel() for m in split)
    col_bias = block.attn.qkv.bias.numel() + block.mlp.fc.bias.numel()
    row_bias = block.attn.proj.bias.numel() + block.mlp.proj.bias.numel()
    assert tp_expected_bytes(cfg.n_embd, world) == 4 * ((weights + col_bias) // world + row_bias)
    w = block.attn.qkv.weight.detach()
    for rank in range(world):  # the checker's idea of rank r's qkv rows is the reference's
        got = _expected_shard("blocks.0.attn.qkv.weight", w, (3 * cfg.n_embd // world, cfg.n_embd), rank, world, cfg)
        assert torch.equal(got, w[qkv_rows(cfg.n_embd, cfg.n_head, rank, world)])
    assert not dist.is_initialized()
