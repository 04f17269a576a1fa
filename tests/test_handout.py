"""`make handout`: the course without its reference, graded as a learner in a class would grade it."""
import json
import os
import subprocess
import sys

import pytest

from checker import handout
from conftest import ROOT

pytestmark = pytest.mark.timeout(300)


@pytest.mark.exhaustive  # 11 s: CI's second tier (make test stays under 15 min)
def test_a_handout_has_no_reference_and_its_grade_says_who_grades_what_needs_it(tmp_path):
    dest = tmp_path / "handout"
    assert handout.write(dest) > 100
    assert not (dest / "solutions").exists() and not (dest / "tests").exists() and (dest / "HANDOUT.txt").exists()
    assert (dest / "labs" / "lab1_baseline" / "step.py").exists() and (dest / "checker" / "cli.py").exists()
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(dest), "COURSE_DATA_DIR": str(ROOT / "data")}
    r = subprocess.run([sys.executable, "-m", "checker", "grade", "lab1", "--only", "step_matches_reference",
                        "--only", "throughput", "--only", "memory_reported", "--json", str(out)],
                       cwd=dest, env=env, capture_output=True, text=True, timeout=240)
    rows = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    for name in ("step_matches_reference", "throughput"):  # the reference's runs: not here
        assert rows[name]["status"] == "not_run" and "class handout" in rows[name]["message"], rows[name]
        assert "your instructor grades this check" in rows[name]["hint"]
    assert rows["memory_reported"]["status"] == "fail" and "TODO" in rows["memory_reported"]["message"], r.stdout
