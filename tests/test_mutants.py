"""Every mutant of the reference fails the check named beside it (tests/mutants/).

Each lab's first mutant (its sentinel) runs in `make test`; the rest are marked `exhaustive` and run in
`make test-exhaustive` (CI runs both), but for the blind mutants of labs 4, 5, 6 and 8, marked `full`
(`make test-full`)."""
import pytest
from mutants import LABS, grade, is_sentinel, learner_tree, mutants, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# The blind mutants of the labs whose every grade runs jobs (4: the incidents, 5: Slurm jobs, 6 and 8: multi-rank
# jobs, 15-45 s a mutant) are graded by `make test-full` and `make bench` (python -m tests.mutants), not in CI's second
# tier, which must end within CI's 90 minutes with the rest; each was graded and killed when it was written.
JOB_LABS = {"lab4", "lab5", "lab6", "lab8"}


def _tier(lab, m):
    if is_sentinel(lab, m):
        return ()
    return pytest.mark.full if m.blind and lab in JOB_LABS else pytest.mark.exhaustive


CASES = [pytest.param(lab, m, id=f"{lab}-{m.name}", marks=_tier(lab, m)) for lab in LABS for m in mutants(lab)]


@pytest.mark.parametrize("lab,mutant", CASES)
def test_the_mutant_fails_its_check(tmp_path, lab, mutant):
    why = unavailable(lab, mutant)
    if why:
        pytest.skip(f"{mutant.check} cannot run here: {why}")
    code, row = grade(learner_tree(tmp_path, lab, mutant), lab, mutant.check, extra=mutant.args)
    assert code == 1 and not row["passed"], (
        f"{lab} mutant {mutant.name!r} ({mutant.why}) passed {mutant.check}: {row}")
    assert row.get("hint"), f"a failed {mutant.check} says what to fix: {row}"


def test_every_check_has_a_wrong_solution_it_must_fail():
    """A check no mutant targets has never been seen to fail a wrong answer: each check of each lab names at least
    one (tests/mutants/<lab>.py), so its wrong solutions are declared beside the check they hold it to."""
    from checker import labs

    bare = {lab: [c.name for c in labs.parent(lab).CHECKS
                  if not any(m.check == c.name for m in mutants(lab))] for lab in LABS}
    assert not any(bare.values()), f"checks no mutant targets: {bare}"
