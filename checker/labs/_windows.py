"""The speed checks' ratios, from the windows the parent timed itself (checker/relay.py `turn_rates`): each side's
rate in each of its windows, the learner's and the baseline's taken in turn A B B A ..., so that each pair of
windows ran back to back under one moment's load. A check grades the median of the pairs' ratios, never the ratio
of each side's medians, which mixes windows of different loads. And whether the timed steps trained as the
baseline's did: a step that behaves only while timed leaves the baseline's losses at once."""
from __future__ import annotations

import math
import statistics


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


def departs_at(mine: list, theirs: list, rtol: float) -> int | None:
    """The first step at which the timed run's losses leave the baseline's (a loss that is not a finite number within
    rtol of the baseline's, relative, or a step one side lacks), or None where they agree step for step."""
    off = next((k for k, (a, b) in enumerate(zip(mine, theirs))
                if not (isinstance(a, (int, float)) and math.isfinite(a) and abs(a - b) <= rtol * abs(b))), None)
    if off is None and len(mine) != len(theirs):
        return min(len(mine), len(theirs))
    return off


def loss_at(losses: list, k: int) -> str:
    """Step k's loss as a message shows it."""
    if k >= len(losses):
        return "none (fewer steps)"
    x = losses[k]
    return f"{x:.6g}" if isinstance(x, (int, float)) else repr(x)[:40]
