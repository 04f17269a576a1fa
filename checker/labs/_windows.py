"""The timed windows that decide a speed check, re-timed by the checker's parent.

In the run (worker side), `Windows.add(name, t0, work)` ends a window begun at `t0 = clock()`: both readings
went to the parent over the run's pipe as they were taken (clock() sends each), and the window travels in the
result as [t0, t1, work]. In the parent, `window_rates(run, windows)` turns each window into work per second:
  - both readings must be ones the parent stamped: a window timed by anything but the checker's clock (a
    clock() that learner code replaced, a rate it rewrote) is refused;
  - the windows of a run follow one another with no time between them (they are timed back to back, learner's
    and reference's alternating): a window ended early, its readings taken elsewhere, leaves a gap and is refused;
  - the seconds of each kind's windows by the run's clock (t1 - t0, summed) must be those the parent saw pass
    between the readings' arrivals, less at most WINDOW_SLACK of them + WINDOW_SLACK_S: a run whose readings
    were shrunk is refused. Rates use the run's own readings, so the stamps add no noise to a check.
The rates, the ratios and the medians a check grades are computed here, in the parent.
What this cannot stop is code in the same process slowing the reference's windows down (checker/README.md,
"The sandbox", limits).
"""
from __future__ import annotations

import statistics

from checker.labs._common import clock

# A stamp is the arrival of a reading at the parent's pipe thread: ~0.1-1 ms after it was taken on an idle machine,
# up to ~45 ms for one reading with two grades at once on 2 cores. Summed over one kind's windows (5-6 of them,
# 1-4 s), the parent's seconds exceeded the run's by at most 37 ms there (lab 3's DDP, 2.1 s): the slack allows
# 5% + 0.1 s (0.2 s on 2 s).
WINDOW_SLACK, WINDOW_SLACK_S = 0.05, 0.1
# The share of the span from the first window's start to the last one's end that the windows cover: ~99.9% in
# an honest run (between two windows: one loop iteration and a no-op synchronise on CPU).
MIN_COVERAGE = 0.95


class Untimed(ValueError):
    """A window whose readings the parent never stamped."""


class Windows:
    """Worker side: the graded windows of one run, by name."""

    def __init__(self):
        self.spans: dict[str, list[list[float]]] = {}

    def add(self, name: str, t0: float, work: float) -> float:
        """End the window begun at t0 = clock(): its work per second, by the run's own clock."""
        t1 = clock()
        self.spans.setdefault(name, []).append([t0, t1, work])
        return work / (t1 - t0)


def window_rates(run, spans: dict, rank: int = 0) -> dict[str, list[float]]:
    """Parent side: each window's work per second, re-timed (above). Raises Untimed."""
    stamps = dict(run.marks.get(rank, ()))
    rates: dict[str, list[float]] = {}
    for name, windows in spans.items():
        own = seen = 0.0
        for t0, t1, work in windows:
            if t0 not in stamps or t1 not in stamps or t1 <= t0:
                raise Untimed(f"a {name} window was not timed by the checker's clock (its readings never reached "
                              "the checker): timings from a run whose clock was replaced are not believed")
            rates.setdefault(name, []).append(work / (t1 - t0))
            own, seen = own + t1 - t0, seen + stamps[t1] - stamps[t0]
        if own < seen - WINDOW_SLACK * seen - WINDOW_SLACK_S:
            raise Untimed(f"the {name} windows measured {own:.2f} s by the run's clock where the checker saw "
                          f"{seen:.2f} s pass: timings from a run whose clock was changed are not believed")
    bounds = sorted((t0, t1) for windows in spans.values() for t0, t1, _ in windows)
    if any(b[0] < a[1] for a, b in zip(bounds, bounds[1:])):
        raise Untimed("two timed windows overlap: each window's readings must be its own")
    covered = sum(t1 - t0 for t0, t1 in bounds)
    if bounds and covered < MIN_COVERAGE * (bounds[-1][1] - bounds[0][0]):
        raise Untimed(f"the timed windows cover {covered / (bounds[-1][1] - bounds[0][0]):.0%} of the time from the "
                      "first to the last, where they follow one another: a window was ended before its work was "
                      "done")
    return rates


def paired_ratio(rates: dict[str, list[float]], a: str, b: str) -> float:
    """The median of a's rate over b's, window pair by window pair (each pair run back to back, same load)."""
    return statistics.median(x / y for x, y in zip(rates[a], rates[b]))


def medians(rates: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(v) for name, v in rates.items()}


def mixed_moments(ratio: float, mine: float, theirs: float) -> str:
    """Why the medians' ratio may differ from the graded one, said where it does (by more than 5%)."""
    if not theirs or abs(mine / theirs / ratio - 1) <= 0.05:
        return ""
    return (f". The graded ratio is the pairs' ({ratio:.2f}x), not the medians' ({mine / theirs:.2f}x): each pair of "
            "windows ran back to back under one moment's load, while each side's own median mixes windows of "
            "different loads")


def checked_rates(run, spans: dict, rank: int = 0) -> tuple[dict | None, dict | None]:
    """(window_rates(), None), or (None, the error a check reports) for windows the parent refuses."""
    try:
        return window_rates(run, spans, rank), None
    except Untimed as e:
        return None, {"type": "ClockMismatch", "message": str(e)}
