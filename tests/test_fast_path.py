"""Lab 7's fast path: the reference's predictions on profiles whose answer is known by hand, and the checker's verdict
rules (clear gains and clear losses must be called right, every prediction within 2x). The end-to-end grade is in
tests/test_grades.py; the wrong predictions it must fail are tests/mutants/lab7.py's fast_* mutants."""
import math

import pytest

from checker.labs.lab7 import fast
from checker.labs.lab7.fast_tasks import shapes_for
from solutions.lab7_memory.fast import PAYS, predict_speedup

# a step of 100 ms: 60 ms of matmuls (30 ms in bf16), 10 ms of optimizer (2 ms fused), 55 ms at half the batch
PROFILE = dict(step_s=0.100, half_step_s=0.055, matmul_s=0.060, matmul_bf16_s=0.030, optimizer_s=0.010,
               fused_optimizer_s=0.002)


def test_each_option_changes_only_its_part():
    assert predict_speedup(PROFILE, "bf16") == pytest.approx(100 / 70)
    assert predict_speedup(PROFILE, "fused_adamw") == pytest.approx(100 / 92)
    # fixed = 2 * 55 - 100 = 10 ms, per token part 90 ms: twice the tokens in 10 + 180 ms
    assert predict_speedup(PROFILE, "batch2") == pytest.approx(200 / 190)


def test_batch2_stays_between_no_gain_and_twice():
    """Two noisy timings can say a half step costs more than a whole one, or less than half of it."""
    assert predict_speedup(dict(PROFILE, half_step_s=0.120), "batch2") == pytest.approx(2.0)
    assert predict_speedup(dict(PROFILE, half_step_s=0.040), "batch2") == pytest.approx(1.0)


def test_an_unknown_option_is_refused():
    with pytest.raises(ValueError):
        predict_speedup(PROFILE, "compile")


@pytest.mark.parametrize("p,r,ok", [
    (1.5, 1.4, True), (1.05, 1.30, False),   # a clear gain called "does not pay"
    (1.15, 1.00, False), (1.05, 1.00, True),  # a clear no-gain called "pays"; below the line it is right
    (1.12, 1.10, True), (1.00, 1.15, True),   # the band between: either verdict, if the size is close
    (4.0, 1.5, False), (0.3, 0.7, False),     # off by more than 2x either way
    (math.nan, 1.0, False), (-1.0, 1.0, False), (0.0, 1.0, False),
])
def test_verdicts(p, r, ok):
    assert (fast._verdict(p, r) is None) == ok
    assert PAYS == fast.PAYS  # the checker's line is the contract's


def test_hidden_variants_move_the_shapes():
    shapes = [shapes_for(v) for v in range(6)]
    assert len({tuple(sorted(s.items())) for s in shapes}) == 6
    for s in shapes:  # the compute-bound batch stays even (half of it is measured too)
        assert s["compute_bound"][3] % 2 == 0 and s["launch_bound"][3] >= 1


@pytest.mark.parametrize("variant", range(4))
def test_the_made_up_profiles_are_answered_by_their_arithmetic(variant):
    """Each made-up profile keeps its fixed part strictly inside the step (no clamp engaged, so any right derivation
    gives the checker's number), and the reference meets it exactly; a part's own speedup does not."""
    for name, p in fast.other_devices(variant).items():
        fixed = 2 * p["half_step_s"] - p["step_s"]
        assert 0 < fixed < p["step_s"], name
        assert "shape" not in p
        for option in ("fused_adamw", "bf16", "batch2"):
            assert predict_speedup(p, option) == pytest.approx(fast.arithmetic(p, option)), (name, option)
    gpu = fast.other_devices(variant)["gpu_sub_ms"]
    assert abs(gpu["matmul_s"] / gpu["matmul_bf16_s"] / fast.arithmetic(gpu, "bf16") - 1) > fast.ARITH_TOL
