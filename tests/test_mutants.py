"""Every mutant of the reference fails the check named beside it (tests/mutants/).

Each lab's first mutant (its sentinel) runs in `make test`; the rest are marked `exhaustive` and run in
`make test-exhaustive` (CI runs both)."""
import pytest
from mutants import LABS, grade, is_sentinel, learner_tree, mutants, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CASES = [pytest.param(lab, m, id=f"{lab}-{m.name}", marks=() if is_sentinel(lab, m) else pytest.mark.exhaustive)
         for lab in LABS for m in mutants(lab)]


@pytest.mark.parametrize("lab,mutant", CASES)
def test_the_mutant_fails_its_check(tmp_path, lab, mutant):
    why = unavailable(lab, mutant)
    if why:
        pytest.skip(f"{mutant.check} cannot run here: {why}")
    code, row = grade(learner_tree(tmp_path, lab, mutant), lab, mutant.check, extra=mutant.args)
    assert code == 1 and not row["passed"], (
        f"{lab} mutant {mutant.name!r} ({mutant.why}) passed {mutant.check}: {row}")
    assert row.get("hint"), f"a failed {mutant.check} says what to fix: {row}"
