"""The speed checks' windows as the checker's parent re-times them (checker/labs/_windows.py): readings it never
stamped, a window ended early, overlapping windows are refused; honest windows keep their own clock's seconds."""
from types import SimpleNamespace

import pytest

from checker.labs._windows import Untimed, paired_ratio, window_rates


def _run(readings, lag=0.003):
    """A run whose every reading reached the parent `lag` seconds after it was taken."""
    return SimpleNamespace(marks={0: [(t, 1000.0 + t + lag) for t in readings]})


def _spans(*bounds):
    names = ("learner", "reference")
    spans = {}
    for i, (t0, t1) in enumerate(bounds):
        spans.setdefault(names[i % 2], []).append([t0, t1, 100.0])
    return spans


def test_honest_back_to_back_windows_keep_their_own_seconds():
    bounds = [(1.0, 2.0), (2.0001, 3.0), (3.0002, 4.5), (4.5001, 5.0)]
    rates = window_rates(_run([t for b in bounds for t in b]), _spans(*bounds))
    assert rates == {"learner": [100 / (2.0 - 1.0), 100 / (4.5 - 3.0002)],
                     "reference": [100 / (3.0 - 2.0001), 100 / (5.0 - 4.5001)]}
    assert paired_ratio(rates, "learner", "reference") == pytest.approx((0.9999 / 1.0 + 0.4999 / 1.4998) / 2)


def test_a_reading_the_parent_never_stamped_is_refused():
    bounds = [(1.0, 2.0), (2.0001, 3.0)]
    run = _run([1.0, 2.0, 2.0001])  # 3.0 came from another clock
    with pytest.raises(Untimed, match="not timed by the checker's clock"):
        window_rates(run, _spans(*bounds))


def test_a_window_ended_before_its_work_was_done_leaves_a_gap_and_is_refused():
    bounds = [(1.0, 1.2), (2.0, 3.0), (3.0001, 3.2), (4.0, 5.0)]  # the learner's windows end 0.8 s early
    with pytest.raises(Untimed, match="cover"):
        window_rates(_run([t for b in bounds for t in b]), _spans(*bounds))


def test_overlapping_windows_are_refused():
    bounds = [(1.0, 2.0), (1.5, 2.5)]
    with pytest.raises(Untimed, match="overlap"):
        window_rates(_run([1.0, 1.5, 2.0, 2.5]), _spans(*bounds))


def test_windows_whose_readings_shrank_are_refused_and_honest_lag_is_not():
    """The run's readings say 0.5 s a window, the parent saw 1.0 s pass; a stamp 45 ms late is no reason."""
    shrunk = SimpleNamespace(marks={0: [(1.0, 10.0), (1.5, 11.0), (1.5001, 11.0001), (2.0, 12.0)]})
    with pytest.raises(Untimed, match="measured 1.00 s by the run's clock where the checker saw 2.00 s"):
        window_rates(shrunk, {"learner": [[1.0, 1.5, 100.0], [1.5001, 2.0, 100.0]]})
    late = SimpleNamespace(marks={0: [(1.0, 10.0), (1.5, 10.545)]})
    assert window_rates(late, {"learner": [[1.0, 1.5, 100.0]]}) == {"learner": [200.0]}
