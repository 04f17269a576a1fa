"""Feedback names the actual cause: the TODO that blocked a check, the criterion that failed it."""
from checker.labs import lab2, lab2_eval
from checker.labs._common import Check, error_result
from checker.run import Run

CHECK = Check("resume_exact", "what", "Exact resume needs ... (labs/lab1_baseline/state.py).")


def test_a_check_blocked_by_a_todo_elsewhere_names_that_function_first():
    err = {"type": "NotImplementedError", "message": "TODO(lab1): seed python's random",
           "todo": "TODO(lab1): seed python's random", "where": "labs/lab1_baseline/seeding.py:18 in seed_everything"}
    r = error_result(CHECK, err)
    assert r.hint.startswith("first write seed_everything (labs/lab1_baseline/seeding.py:18)"), r.hint
    assert CHECK.hint in r.hint and "not written yet" in r.message


def test_overlap_shows_the_criterion_that_failed():
    check = next(c for c in lab2.CHECKS if c.name == "overlap")
    part = {"bytes": [100], "bytes_in_backward": [100], "calls": [7], "comm_s": [1.0], "hidden_s": [0.01],
            "exposed_s": [0.5]}
    runs = {"correctness": Run("correctness", 0, 1.0, results=[{"naive": None, "bucketed": part}] * 2, nproc=2)}
    r = lab2_eval.overlap(check, runs)  # every byte launched during backward, 1% of the time hidden
    assert not r.passed and (r.value, r.threshold, r.unit) == (0.01, lab2_eval.HIDDEN_MIN, "of time hidden"), r
    assert "backward waited for them" in r.message
