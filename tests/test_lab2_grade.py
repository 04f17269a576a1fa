"""End to end, lab 2 at world size 2: the reference passes, the starter fails with hints, and each
classic DDP mistake fails the check meant to catch it."""
import pytest

from conftest import first_in_make_test, load_json, run_checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _grade(out_dir, *args):
    r = run_checker("grade", "lab2", "--json", out_dir / "report.json", *args)
    return r, {c["name"]: c for c in load_json(out_dir / "report.json")["checks"]}


MISTAKES = {
    "sum_not_average": ("grad_equivalence", "vs one process on the global batch", [
        ("bucketed.py", "            b.flat.div_(self.world_size)\n", "            b.flat.div_(1)\n"),
        ("naive.py", "                p.grad.div_(self.world_size)\n", "                p.grad.div_(1)\n")]),
    "no_sync_ignored": ("no_sync_accumulation", "expected none inside no_sync()", [
        ("bucketed.py", "        if not self.sync:\n            return\n", "")]),
    "all_reduce_after_backward": ("overlap", "0% of the all-reduced bytes", [  # the hook only copies; finish() does
        # blocking all-reduces
        ("bucketed.py", "            b.flat.div_(self.world_size)\n"
                        "            b.work = dist.all_reduce(b.flat, async_op=True)\n",
         "            pass\n"),
        ("bucketed.py", "            if b.work is None:", "            if False:"),
        ("bucketed.py", "            b.work.wait()\n            for p, off in zip(",
         "            b.flat.div_(self.world_size)\n            dist.all_reduce(b.flat)\n"
         "            for p, off in zip(")]),
    "wait_inside_hook": ("overlap", "backward waited for them", [  # launched from the hook, but backward blocks on it
        ("bucketed.py", "            b.work = dist.all_reduce(b.flat, async_op=True)\n",
         "            b.work = dist.all_reduce(b.flat, async_op=True)\n            b.work.wait()\n")]),
}


@pytest.mark.parametrize("mistake", first_in_make_test(sorted(MISTAKES)))
def test_each_mistake_fails_its_check(lab_tree, mistake):
    check, needle, edits = MISTAKES[mistake]
    tree = lab_tree("lab2_ddp")
    for rel, old, new in edits:
        p = tree / "labs" / "lab2_ddp" / rel
        assert p.read_text().count(old) == 1, (rel, old)  # one edit: an anchor met twice edits both
        p.write_text(p.read_text().replace(old, new))
    r, checks = _grade(tree, "--root", tree, "--only", check)
    assert r.returncode == 1, r.stdout
    assert not checks[check]["passed"] and needle in checks[check]["message"], checks[check]
