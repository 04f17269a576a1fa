"""The speed checks' ratios (checker/labs/_windows.py): the median of back-to-back pairs, and the note a report adds
where the medians' ratio tells another story."""
import pytest

from checker.labs._windows import medians, mixed_moments, paired_ratio


def test_the_graded_ratio_is_the_median_of_the_pairs():
    # load halves both sides' rates in the second pair: pairs 0.5 and 0.5, whatever each side's median says
    rates = {"learner": [50.0, 25.0, 50.0], "reference": [100.0, 50.0, 100.0]}
    assert paired_ratio(rates, "learner", "reference") == pytest.approx(0.5)
    assert medians(rates) == {"learner": 50.0, "reference": 100.0}


def test_a_load_that_moves_between_pairs_is_explained_where_the_medians_disagree():
    # the learner's windows fell in quiet moments more often: its median looks faster than the pairs say
    rates = {"learner": [100.0, 90.0, 40.0], "reference": [110.0, 100.0, 45.0]}
    ratio, m = paired_ratio(rates, "learner", "reference"), medians(rates)
    assert ratio == pytest.approx(0.9)
    assert mixed_moments(ratio, m["learner"], m["reference"]) == ""  # 90/100 = the pairs' 0.9
    note = mixed_moments(0.96, 22482, 20075)
    assert "0.96x" in note and "1.12x" in note
