"""End to end, lab 3 at world size 2: the reference passes, the starter fails with hints, and the two
classic sharding mistakes (state not sharded, root not wrapped) fail the memory checks."""
import pytest

from conftest import load_json, run_checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _grade(out_dir, *args):
    r = run_checker("grade", "lab3", "--json", out_dir / "report.json", *args)
    return r, {c["name"]: c for c in load_json(out_dir / "report.json")["checks"]}


def test_unsharded_state_and_unwrapped_root_fail_the_memory_checks(lab_tree):
    tree = lab_tree("lab3_sharding")
    edits = [  # ZeRO-1 that keeps every parameter's moments on every rank; FSDP without the root unit
        ("zero1.py", 'local = [{**g, "params": [p for p in g["params"] if self.owner[id(p)] == self.rank]} for g in groups]',
         'local = [{**g, "params": list(g["params"])} for g in groups]'),
        ("fsdp.py", "    fully_shard(model, **kwargs)\n", ""),
    ]
    for rel, old, new in edits:
        p = tree / "labs" / "lab3_sharding" / rel
        assert old in p.read_text(), (rel, old)
        p.write_text(p.read_text().replace(old, new))
    r, checks = _grade(tree, "--root", tree, "--only", "zero1_memory", "--only", "fsdp_memory",
                       "--only", "zero1_equivalence")
    assert r.returncode == 1
    assert not checks["zero1_memory"]["passed"] and checks["zero1_memory"]["value"] > 1.9  # ~2x: full state
    assert not checks["fsdp_memory"]["passed"] and "local shards hold" in checks["fsdp_memory"]["message"]
    assert checks["zero1_equivalence"]["passed"]  # the arithmetic was right; only the memory was wasted
