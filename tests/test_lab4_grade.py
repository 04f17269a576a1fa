"""End to end, lab 4: fixes tuned to the numbers the learner saw fail, and an invented evidence line fails.
(The reference passing, the pristine starter failing every check and no process left behind after
a grade: tests/test_grades.py.)"""
import pytest

from conftest import load_json, run_checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _edit(tree, rel, old, new):
    p = tree / "labs" / "lab4_debugging" / rel
    assert p.read_text().count(old) == 1, (rel, old)  # one edit: an anchor met twice edits both
    p.write_text(p.read_text().replace(old, new))


def test_tuned_fixes_and_invented_evidence_fail(lab_tree):
    tree = lab_tree("lab4_debugging")
    # another fixed port: fine alone, but two jobs on one node still collide
    _edit(tree, "incident7.py", 'return ["--standalone", f"--nproc-per-node={nproc}"]',
          'return ["--nnodes=1", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", "--master-port=29517"]')
    # the remainder dropped only for the epoch size the learner ran
    _edit(tree, "incident4.py", "return list(range(rank, n - n % world, world))",
          "return list(range(rank, 48 if n == 49 else n, world))")
    # the right cause, but a line that is nowhere in the faulty job's log
    _edit(tree, "diagnosis.toml", 'evidence = "Unable to find address for: ib0"',
          'evidence = "the job could not find its network interface"')
    only = ["fixed_incident7", "fixed_incident4", "diagnosed_incident6", "diagnosed_incident7"]
    r = run_checker("grade", "lab4", "--root", tree, "--json", tree / "report.json", *(f"--only={c}" for c in only))
    checks = {c["name"]: c for c in load_json(tree / "report.json")["checks"]}
    assert r.returncode == 1
    assert not checks["fixed_incident7"]["passed"], checks["fixed_incident7"]
    assert not checks["fixed_incident4"]["passed"] and "shard_indices(" in checks["fixed_incident4"]["message"]
    assert "not in the checker's log" in checks["diagnosed_incident6"]["message"]
    assert checks["diagnosed_incident7"]["passed"], checks["diagnosed_incident7"]


@pytest.mark.exhaustive
@pytest.mark.parametrize("variant", [7, 11])
def test_forensics_pass_on_the_reference_at_hidden_variants_and_leave_nothing(tmp_path, variant):
    """The faulty jobs (desync.py), the link probe and the leaking loop (memleak.py) move their rank, step, rate and
    sizes with the variant; the reference analysers still find them, and no rank of a hung job outlives the grade."""
    from conftest import processes_with
    r = run_checker("grade", "lab4", "--solutions", "--variant", str(variant), "--only", "desync_found",
                    "--only", "slow_rank_found", "--only", "memory_leak_found", "--json", tmp_path / "report.json",
                    env={"TMPDIR": str(tmp_path)})
    checks = {c["name"]: c for c in load_json(tmp_path / "report.json")["checks"]}
    assert r.returncode == 0, r.stdout[-3000:]
    assert checks["desync_found"]["value"] == 5 and 0.75 <= checks["slow_rank_found"]["value"] <= 1.25
    assert checks["memory_leak_found"]["passed"] and checks["memory_leak_found"]["value"] == 4
    assert processes_with(str(tmp_path)) == []
