"""Feedback names the actual cause: the TODO that blocked a check, the criterion that failed it."""
from checker.labs._common import Check, error_result
from checker.labs.lab2 import checks as lab2
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
    r = lab2.overlap(check, runs)  # every byte launched during backward, 1% of the time hidden
    assert not r.passed and (r.value, r.threshold, r.unit) == (0.01, lab2.HIDDEN_MIN, "of time hidden"), r
    assert "backward waited for them" in r.message


def test_a_raised_error_gets_the_hint_for_its_symptom_not_the_checks():
    from checker.labs.lab7.checks import CHECKS

    check = next(c for c in CHECKS if c.name == "checkpoint_equivalence")
    err = {"type": "RuntimeError", "message": "Tensor cached during selective activation checkpoint has been mutated",
           "traceback": "...", "where": "labs/lab7_memory/recompute.py:40 in checkpointed"}
    r = error_result(check, err)
    assert r.hint.startswith("Your selective-recompute policy saves the output of an op") and "RNG" not in r.hint[:80]
    other = error_result(check, {"type": "ValueError", "message": "something else", "traceback": ""})
    assert other.hint == check.hint  # no symptom seen: the check's own hint


def test_a_byte_estimate_off_by_one_term_is_named_with_its_sign():
    from checker.labs.lab7.checks import explain_bytes

    shapes = [(64, 4, 2, 64, 0.1), (96, 3, 3, 40, 0.1), (48, 2, 4, 24, 0.0)]
    counted_twice = explain_bytes(shapes, [4 * 2 * 64 * 64, 4 * 3 * 40 * 96, 4 * 4 * 24 * 48])
    assert counted_twice.startswith("+32,768 B at h=64 a=4 b=2 s=64 is +4 x b*s*h bytes, one fp32 tensor's worth")
    assert "does not keep" in counted_twice
    masks = explain_bytes(shapes, [-2 * 2 * 64 * 64, -2 * 3 * 40 * 96, 0])  # dropout off in the third: no masks
    assert "-2 x b*s*h" in masks and "dropout" in masks and "missing from your count" in masks
    scores = explain_bytes(shapes, [-4 * 4 * 2 * 64 * 64, -4 * 3 * 3 * 40 * 40, -4 * 2 * 4 * 24 * 24])
    assert "-4 x a*b*s^2" in scores
    assert explain_bytes(shapes, [5, 7, 0]) == ""  # no single term: the check's own hint stays


def test_a_collective_that_timed_out_waiting_for_a_peer_says_a_rank_skipped_it():
    """gloo's words for a peer that never came, from labs 2, 3, 6, 9 and 10 alike: the hint asks which rank skipped
    or reordered a collective, not the check's own hint about the values."""
    check = next(c for c in lab2.CHECKS if c.name == "grad_equivalence")
    err = {"type": "RuntimeError", "message": "naive: [third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] "
           "Timed out waiting 30000ms for send operation to complete", "traceback": ""}
    r = error_result(check, err)
    assert r.hint.startswith("A rank waited in a collective that a peer never joined"), r.hint
    assert check.hint in r.hint  # the check's own hint still follows


def test_a_byte_estimate_off_at_some_shapes_names_the_slip_that_fits():
    """Dropout-only and view-only errors name their likely slip, in the precision and recompute mode they show in."""
    from checker.labs.lab7.checks import explain_bytes

    shapes = [(64, 4, 2, 64, 0.1), (96, 3, 3, 40, 0.1), (48, 2, 4, 24, 0.0), (64, 4, 1, 48, 0.1)]
    bsh = [b * s * h for h, a, b, s, p in shapes]
    halved = explain_bytes(shapes, [-6 * n if p else 0 for n, (*_, p) in zip(bsh, shapes)], "bf16")
    assert "dropout on" in halved and "autocast dtype" in halved and "masks?" not in halved
    bools = explain_bytes(shapes, [-6 * n if p else 0 for n, (*_, p) in zip(bsh, shapes)], "fp32")
    assert "1-byte bools" in bools
    view = explain_bytes(shapes, [0, 0, 0, -8 * bsh[3]])
    assert "b = 1 or a = 1" in view and "v counted as a copy" in view
    selective = explain_bytes(shapes[:3], [18 * n for n in bsh[:3]], "bf16", "selective")
    assert "counted in fp32" in selective
