"""Lab 1's classic mistakes, one per file, each failing exactly the check meant to catch it."""
import pytest

from checker.seams import link_shared
from conftest import load_json, run_checker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _grade(tmp_path, *args):
    out = tmp_path / "report.json"
    r = run_checker("grade", "lab1", "--json", out, *args)
    return r, load_json(out)


MISTAKES = [  # (file, reference text, the mistake)
    ("seeding.py", "    torch.manual_seed(seed)\n", "    torch.manual_seed(0)\n"),  # the seed is ignored
    ("state.py", '        "rng": ckpt.rng_state(),\n', ""),  # RNG not saved: dropout masks differ
    ("state.py", '    ckpt.set_rng_state(state["rng"])\n', ""),
    ("meters.py", "        elif self.steps > self.warmup_steps:\n            self.tokens += tokens\n",
     "        if True:\n            self.tokens += tokens\n"),  # warm-up tokens counted
    ("step.py", "    _, loss = model(inputs, targets)\n",  # two wasted forward passes
     "    _, loss = model(inputs, targets)\n    for _ in range(2):\n        model(inputs, targets)\n"),
    ("meters.py", "for p in model.parameters())\n    grads",  # the tied weight counted twice
     "for _, p in model.named_parameters(remove_duplicate=False))\n    grads"),
    ("pipeline.py", "batch_sampler=batches, num_workers=2, prefetch_factor=4,\n"  # every batch prepared in-process
                    "                        pin_memory=cdist.pin_memory(device))\n", "batch_sampler=batches)\n"),
]


@pytest.fixture(scope="module")
def mistakes_report(tmp_path_factory):
    """One learner tree with one classic mistake per file, graded once."""
    import shutil

    from conftest import ROOT
    tree = tmp_path_factory.mktemp("tree")
    for part in ("labs", "solutions"):
        (tree / part).mkdir()
        (tree / part / "__init__.py").write_text("")
        shutil.copytree(ROOT / "solutions" / "lab1_baseline", tree / part / "lab1_baseline")
    link_shared(tree / "labs", ROOT)
    for rel, old, new in MISTAKES:
        p = tree / "labs" / "lab1_baseline" / rel
        assert p.read_text().count(old) == 1, old  # one edit: an anchor met twice edits both
        p.write_text(p.read_text().replace(old, new))
    r, rep = _grade(tree, "--root", tree)
    return r, {c["name"]: c for c in rep["checks"]}


@pytest.mark.parametrize("check,needle", [
    ("reproducible", "seed it with the seed you are given"),
    ("resume_exact", "first differs at step"),
    ("throughput", "yours"),
    ("throughput_meter", "over the same 8 steps after warm-up"),
    ("memory_reported", "params:"),
    ("input_pipeline", "for your loader"),
])
def test_each_mistake_fails_its_check(mistakes_report, check, needle):
    r, checks = mistakes_report
    assert r.returncode == 1
    assert not checks[check]["passed"] and needle in checks[check]["message"], checks[check]


def test_slow_loader_is_measured_and_the_hint_asks_without_handing_over_the_fix(mistakes_report):
    """The measured stall fails the check; the hint points at the loader and asks where the work could run, and
    names no mechanism (that is `checker hint lab1 pipeline.make_loader`'s tier 2)."""
    _, checks = mistakes_report
    c = checks["input_pipeline"]
    assert c["value"] > c["threshold"] and "pipeline.py" in c["hint"] and "Where else" in c["hint"], c
    assert "checker hint lab1 pipeline.make_loader" in c["hint"] and "DataLoader" not in c["hint"], c


def test_mistakes_do_not_fail_an_unrelated_check(mistakes_report):
    _, checks = mistakes_report
    assert checks["loss_decreases"]["passed"], checks["loss_decreases"]
