"""The speed checks' ratios (checker/labs/_windows.py): the median of back-to-back pairs, and the note a report adds
where the medians' ratio tells another story."""
import pytest

from checker.labs._windows import departs_at, loss_at, medians, mixed_moments, paired_ratio


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


def test_the_timed_steps_depart_at_the_first_loss_that_leaves_the_baselines():
    assert departs_at([1.0, 2.0, 3.0], [1.0, 2.0005, 3.0], 1e-3) is None
    assert departs_at([1.0, 2.1, 3.0], [1.0, 2.0, 3.0], 1e-3) == 1
    assert departs_at([1.0, float("nan")], [1.0, 2.0], 1e-3) == 1
    assert departs_at([1.0, "2.0"], [1.0, 2.0], 1e-3) == 1  # whatever a run reported, only a number counts
    assert departs_at([1.0], [1.0, 2.0], 1e-3) == 1 and departs_at([1.0, 2.0, 9.0], [1.0, 2.0], 1e-3) == 2


def test_a_step_one_side_lacks_or_a_loss_that_is_no_number_reads_as_such():
    assert loss_at([1.25, 2.0], 0) == "1.25" and loss_at([1.0], 3) == "none (fewer steps)"
    assert loss_at([None], 0) == "None"
