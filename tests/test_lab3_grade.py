"""End to end, lab 3 at world size 2: the classic sharding mistakes fail the checks that measure them: state not
sharded (zero1_memory), the root not wrapped (fsdp_memory), FSDP2 on the root only (fsdp_structure: the bytes at
rest look sharded), ZeRO-2 that all-reduces and slices (zero_comm_bytes: 1.5x DDP's bytes, the numbers right).
Every lab 3 TODO has its mutant in tests/mutants/lab3.py."""
import pytest

from conftest import load_json, run_checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _grade(out_dir, *args):
    r = run_checker("grade", "lab3", "--json", out_dir / "report.json", *args)
    return r, {c["name"]: c for c in load_json(out_dir / "report.json")["checks"]}


def test_unsharded_state_unwrapped_root_and_allreduce_slicing_fail_their_checks(lab_tree):
    tree = lab_tree("lab3_sharding")
    edits = [  # ZeRO-1 that keeps every parameter's moments on every rank; FSDP without the root unit
        ("zero1.py", 'local = [{**g, "params": [p for p in g["params"] if self.owner[id(p)] == self.rank]} '
                     'for g in self.param_groups]',
         'local = [{**g, "params": list(g["params"])} for g in self.param_groups]'),
        ("fsdp.py", "    fully_shard(model, **kwargs)\n", ""),
        ("zero2.py", "b.work = dist.reduce_scatter_single(b.flat_grad[b.lo:b.hi], b.flat_grad, async_op=True)",
         "b.work = dist.all_reduce(b.flat_grad, async_op=True)"),
    ]
    for rel, old, new in edits:
        p = tree / "labs" / "lab3_sharding" / rel
        assert p.read_text().count(old) == 1, (rel, old)  # one edit: an anchor met twice edits both
        p.write_text(p.read_text().replace(old, new))
    r, checks = _grade(tree, "--root", tree, "--only", "zero1_memory", "--only", "fsdp_memory",
                       "--only", "zero1_equivalence", "--only", "zero_comm_bytes", "--only", "zero2_equivalence")
    assert r.returncode == 1
    assert not checks["zero1_memory"]["passed"] and checks["zero1_memory"]["value"] > 1.9  # ~2x: full state
    assert not checks["fsdp_memory"]["passed"] and "local shards hold" in checks["fsdp_memory"]["message"]
    assert checks["zero1_equivalence"]["passed"]  # the arithmetic was right; only the memory was wasted
    assert (not checks["zero_comm_bytes"]["passed"]
            and checks["zero_comm_bytes"]["value"] == pytest.approx(1.5, abs=0.01))
    assert checks["zero2_equivalence"]["passed"]  # all-reduce + slice: right numbers, the bytes are what is wrong


@pytest.mark.exhaustive  # make test has the lab's first mistakes (above) and its sentinel mutant
def test_fsdp_on_the_root_only_fails_the_structure_not_the_bytes_at_rest(lab_tree):
    tree = lab_tree("lab3_sharding")
    p = tree / "labs" / "lab3_sharding" / "fsdp.py"
    old = "    for block in model.blocks:\n        fully_shard(block, **kwargs)\n"
    assert p.read_text().count(old) == 1, old  # one edit: an anchor met twice edits both
    p.write_text(p.read_text().replace(old, ""))
    r, checks = _grade(tree, "--root", tree, "--only", "fsdp_structure", "--only", "fsdp_memory")
    assert r.returncode == 1 and checks["fsdp_memory"]["passed"]  # after the step everything is sharded again
    s = checks["fsdp_structure"]
    assert not s["passed"] and "1 all-gathers" in s["message"] and s["value"] > s["threshold"]
