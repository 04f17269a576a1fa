import importlib
import subprocess

import pytest

from checker import seams, starters
from conftest import ROOT


def test_committed_starters_equal_the_generated_ones():
    files = starters.generate()
    assert files, "no lab in solutions/"
    stale = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run `make starters`: {stale}"
    orphans = [str(p) for p in (ROOT / "labs").glob("lab*/**/*") if p.suffix in starters.SUFFIXES and p not in files]
    assert not orphans, f"starter files with no solution: {orphans}"


def test_markers_become_a_todo_at_the_same_indentation():
    src = ("def f(x):\n"
           "    # BEGIN SOLUTION return twice \"x\"\n"
           "    return 2 * x\n"
           "    # END SOLUTION\n"
           "import solutions.lab3_sharding.zero\n")
    out = starters.strip_solutions(src, "lab3", "f.py")
    assert out == ("def f(x):\n"
                   "    raise NotImplementedError(\"TODO(lab3): return twice 'x'\")\n"
                   "import labs.lab3_sharding.zero\n")


def test_shell_and_yaml_blocks_become_todos_that_keep_the_file_parseable():
    script = ("#!/bin/bash\n#SBATCH --nodes=1\n"
              "# BEGIN SOLUTION the requeue directives\n#SBATCH --requeue\n# END SOLUTION\n"
              "set -u\n"
              "  # BEGIN SOLUTION trap the 'warning', then `scancel $SLURM_JOB_ID`\n  trap on_warning USR1\n"
              "  # END SOLUTION\n")
    out = starters.strip_solutions(script, "lab5", "train.sbatch")
    # directives: a comment (sbatch stops reading #SBATCH at the first command); code: fails loudly
    assert out == ("#!/bin/bash\n#SBATCH --nodes=1\n# TODO(lab5): the requeue directives\nset -u\n"
                   "  echo 'TODO(lab5): trap the \u2019warning\u2019, then `scancel $SLURM_JOB_ID`' >&2; exit 1\n")
    # and bash prints it as it is: nothing in it is expanded or run
    line = out.splitlines()[-1].replace("; exit 1", "")
    r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env={"SLURM_JOB_ID": "42"})
    assert r.stderr == "TODO(lab5): trap the \u2019warning\u2019, then `scancel $SLURM_JOB_ID`\n"
    manifest = "spec:\n  # BEGIN SOLUTION indexed completion\n  completionMode: Indexed\n  # END SOLUTION\n"
    assert starters.strip_solutions(manifest, "lab5", "job.yaml") == "spec:\n  # TODO(lab5): indexed completion\n"


@pytest.mark.parametrize("src,err", [
    ("# BEGIN SOLUTION a\n# BEGIN SOLUTION b\n", "inside"),
    ("# END SOLUTION\n", "without BEGIN"),
    ("# BEGIN SOLUTION a\nx = 1\n", "never closed"),
])
def test_unbalanced_markers_are_errors(src, err):
    with pytest.raises(ValueError, match=err):
        starters.strip_solutions(src, "lab1", "f.py")


def test_starter_imports_and_each_function_raises_its_todo():
    lab = importlib.import_module("labs.lab1_baseline")
    with pytest.raises(NotImplementedError, match=r"TODO\(lab1\): .*seed.*\(hints: checker hint lab1 seeding"):
        lab.seed_everything(0)
    with pytest.raises(NotImplementedError, match=r"TODO\(lab1\)"):
        lab.train_step(None, None, None, (None, None))
    train = importlib.import_module("labs.lab1_baseline.train")
    assert "python -m labs.lab1_baseline.train" in train.__doc__ and "solutions" not in train.__doc__


def test_lab1_pipeline_starter_runs_as_handed_out():
    """A `# STARTER` block: the learner gets the slow pipeline that works, with its TODO as a comment."""
    import torch

    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.pipeline import WindowDataset
    from labs.lab1_baseline import make_loader

    data = TokenFile.open(ensure_corpus(256))
    batches = iter(make_loader(WindowDataset(data.directory, 64, cost_s=0.0), [[3, 5], [8, 1]], "cpu"))
    for ids in ([3, 5], [8, 1]):
        x, y = next(batches)
        assert all(torch.equal(a, b) for a, b in zip((x, y), data.batch(ids, 64)))
    text = (ROOT / "labs" / "lab1_baseline" / "pipeline.py").read_text()
    assert ("    # TODO(lab1): the model waits" in text
            and "loader = DataLoader(dataset, batch_sampler=batches)\n" in text)


def test_every_mutant_edits_one_place_of_the_reference():
    """A mutant's `old` text occurs exactly once in its file: a hint tier that quotes a line of code word for word
    would make it twice (and the mutant would edit the comment or refuse to run). Checked here, without grading."""
    from mutants import LABS, mutants

    twice = []
    for lab in LABS:
        for m in mutants(lab):
            n = (ROOT / "solutions" / seams.SEAMS[lab].folder / m.file).read_text().count(m.old)
            if n != 1:
                twice.append(f"{lab} {m.name}: {n} times in {m.file}")
    assert not twice, twice
