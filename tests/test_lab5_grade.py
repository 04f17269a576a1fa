"""Lab 5's grade where no Slurm answers: every check that needs the scheduler fails and says how to start
one, never a silent pass. The manifests need no scheduler and are graded all the same."""
import pytest

from checker.labs import lab5
from conftest import load_json, run_checker

pytestmark = pytest.mark.timeout(120)


def test_without_slurm_every_scheduler_check_fails_with_the_way_to_start_it(tmp_path):
    r = run_checker("grade", "lab5", "--solutions", "--json", tmp_path / "r.json",
                    env={"SLURM_CONF": str(tmp_path / "no-such-slurm.conf"), "TMPDIR": str(tmp_path)})
    assert r.returncode == 1, r.stdout + r.stderr
    checks = {c["name"]: c for c in load_json(tmp_path / "r.json")["checks"]}
    assert list(checks) == [c.name for c in lab5.CHECKS]
    for name, c in checks.items():
        if name == "k8s_manifests_valid":
            assert c["passed"], c
        else:
            assert not c["passed"] and "no Slurm here" in c["message"] and "make slurm-up" in c["hint"], c
