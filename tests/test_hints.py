"""Learners derive the code: every TODO states a contract (no calls to make), every task has its hint tiers, and
`checker hint` reveals them one at a time, keeping the learner's progress in the learner's own tree."""
import json
import re
import shutil

import pytest

from checker import hints, seams, starters
from conftest import ROOT, run_checker

TASKS = {lab: hints.loads(text)["tasks"] for p, text in starters.generate().items() if p.name == hints.FILE
         for lab in [json.loads(text)["lab"]]}

# The rule a contract (and tier 1) is held to: no call syntax and no API names. Choosing the call is the lesson:
# "after it, every rank holds the average of the gradients" leaves it to the learner; "all_reduce(g)" does not.
CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\(")
API = re.compile(r"\b(torch|dist|F|nn|cdist|np|os|deepspeed|dcp|time|random)\.[A-Za-z_]")


def _breaks_rule(text: str) -> list[str]:
    return CALL.findall(text) + API.findall(text)


def _all_tasks():
    return [(lab, t) for lab, ts in sorted(TASKS.items()) for t in ts]


def test_every_lab_with_a_starter_has_tasks():
    folders = {p.parent.name for p in (ROOT / "solutions").glob("lab*/*.py")}
    assert {seams.SEAMS[lab].folder for lab in TASKS} == folders - {"__pycache__"}


@pytest.mark.parametrize("lab,task", _all_tasks(), ids=lambda v: v if isinstance(v, str) else v["name"])
def test_each_task_states_a_contract_and_has_three_tiers(lab, task):
    where = f"solutions/{task['file']} ({task['name']})"
    assert task["contract"] and task["contract"] != "complete this part", f"{where}: no contract after BEGIN SOLUTION"
    assert not _breaks_rule(task["contract"]), (
        f"{where}: the contract names calls {_breaks_rule(task['contract'])}: say what must hold, not what to call")
    assert len(task["tiers"]) == 3, f"{where}: {len(task['tiers'])} hint tiers (# HINT 1, 2, 3 under the contract)"
    assert not _breaks_rule(task["tiers"][0]), (
        f"{where}: tier 1 (the concept) names calls {_breaks_rule(task['tiers'][0])}")
    assert len(set(task["tiers"])) == 3 and task["contract"] not in task["tiers"], f"{where}: tiers repeat"


def test_no_todo_in_the_starters_names_a_call():
    """What the learner reads first, the raised message, is the contract (and where to ask for more)."""
    todo = re.compile(r"TODO\(lab\d+\): (.*?)(?: \(hints: checker hint [^)]*\))?$")
    bad = []
    for p in sorted((ROOT / "labs").glob("lab*/**/*")):
        if p.suffix not in starters.SUFFIXES or p.parent.name == "lab4_debugging":
            continue
        text = re.sub(r'"\s*\n\s*"', "", p.read_text())  # the raise's adjacent literals joined
        text = re.sub(r"'[ \\]*\n\s*'", " ", text)          # the echo's arguments joined
        for m in re.finditer(r"TODO\(lab\d+\): [^\"\n]*", text):
            body = todo.match(m.group(0))
            if body and _breaks_rule(body.group(1)):
                bad.append(f"{p.relative_to(ROOT)}: {_breaks_rule(body.group(1))}")
    assert not bad, "\n".join(bad)


def test_the_tiers_parse_in_order_and_go_on_under_their_first_word():
    src = ("class Meter:\n"
           "    def __init__(self):\n"
           "        # BEGIN SOLUTION the window is open\n"
           "        #                after warm-up\n"
           "        # HINT 1         what is warm-up for?\n"
           "        # HINT 2         two clocks\n"
           "        #                and a count\n"
           "        # HINT 3         the recipe\n"
           "        self.t = 0\n"
           "        # END SOLUTION\n"
           "\n"
           "    def rate(self):\n"
           "        # BEGIN SOLUTION tokens over seconds\n"
           "        return 1\n"
           "        # END SOLUTION\n")
    text, tasks = starters.parse(src, "lab1", "solutions/lab1_baseline/meters.py", first_line=3)
    assert [t.name for t in tasks] == ["meters.Meter", "meters.rate"]
    assert tasks[0].contract == "the window is open after warm-up"
    assert tasks[0].tiers == ["what is warm-up for?", "two clocks and a count", "the recipe"]
    assert tasks[1].tiers == []
    joined = re.sub(r'"\n\s*"', "", text)  # the raise's adjacent literals, as Python joins them
    assert "TODO(lab1): the window is open after warm-up (hints: checker hint lab1 meters.Meter)" in joined
    assert "HINT" not in text and "what is warm-up" not in text
    lines = text.splitlines()
    assert "TODO(lab1): the window" in lines[tasks[0].line - 3] and "tokens over" in lines[tasks[1].line - 3]
    with pytest.raises(ValueError, match="HINT 2 after the contract"):
        starters.parse("# BEGIN SOLUTION c\n# HINT 2         x\n# END SOLUTION\n", "lab1", "f.py")


def test_a_method_name_met_twice_takes_its_class():
    src = ("class A:\n    def forward(self):\n        # BEGIN SOLUTION a\n        pass\n        # END SOLUTION\n"
           "class B:\n    def forward(self):\n        # BEGIN SOLUTION b\n        pass\n        # END SOLUTION\n"
           "def f():\n    # BEGIN SOLUTION c\n    pass\n    # END SOLUTION\n"
           "    # BEGIN SOLUTION d\n    pass\n    # END SOLUTION\n")
    _, tasks = starters.parse(src, "lab6", "solutions/lab6_model_parallel/tp.py")
    assert [t.name for t in tasks] == ["tp.A.forward", "tp.B.forward", "tp.f", "tp.f.2"]


def test_every_hint_the_course_points_at_exists():
    """`checker hint labN TASK` in a check's hint, a README or a TODO must name a task that resolves."""
    said = re.compile(r"checker hint (lab\d+) ([\w.\-]+)")
    bad = []
    for p in [*(ROOT / "checker").rglob("*.py"), *(ROOT / "labs").glob("lab*/README.md")]:
        for lab, query in said.findall(p.read_text()):
            query = query.rstrip(".")
            if query.isupper() or query == "TASK":
                continue
            try:
                hints.find(TASKS[lab], query)
            except (LookupError, KeyError) as e:
                bad.append(f"{p.relative_to(ROOT)}: checker hint {lab} {query}: {e}")
    assert not bad, "\n".join(bad)


@pytest.fixture
def learner_tree(tmp_path):
    """A learner's tree: labs/ holding lab 2's starter and its hints file."""
    (tmp_path / "labs").mkdir()
    shutil.copytree(ROOT / "labs" / "lab2_ddp", tmp_path / "labs" / "lab2_ddp",
                    ignore=shutil.ignore_patterns("__pycache__", hints.OPENED))
    return tmp_path


def test_checker_hint_lists_then_opens_one_tier_at_a_time_and_keeps_progress(learner_tree):
    task = next(t for t in TASKS["lab2"] if t["name"].endswith("grad_ready"))
    r = run_checker("hint", "lab2", "--root", learner_tree, timeout=60)
    assert r.returncode == 0 and task["name"] in r.stdout and "0/3 opened" in r.stdout, r.stdout + r.stderr
    assert not any(tier[:40] in r.stdout for tier in task["tiers"])  # listing opens nothing
    for k in (1, 2, 3):
        r = run_checker("hint", "lab2", "grad_ready", "--root", learner_tree, timeout=60)
        out = " ".join(r.stdout.split())
        assert r.returncode == 0 and f"hint {k}" in out and f"hint {k + 1}" not in out, out
        assert " ".join(task["tiers"][k - 1].split())[:60] in out  # rich wraps long lines
        opened = json.loads((learner_tree / "labs/lab2_ddp" / hints.OPENED).read_text())
        assert opened[task["name"]]["tier"] == k and len(opened[task["name"]]["at"]) == k
    r = run_checker("hint", "lab2", "grad_ready", "--root", learner_tree, timeout=60)
    assert "last tier" in r.stdout and json.loads((learner_tree / "labs/lab2_ddp" / hints.OPENED).read_text())[
        task["name"]]["tier"] == 3
    assert "3/3 opened" in run_checker("hint", "lab2", "--root", learner_tree, timeout=60).stdout
    assert hints.summary(learner_tree / "labs/lab2_ddp") == f"{task['name']} 3/3"


def test_checker_hint_refuses_an_unknown_or_ambiguous_task_and_hints_turned_off(learner_tree):
    r = run_checker("hint", "lab2", "no_such_task", "--root", learner_tree, timeout=60)
    assert r.returncode == 2 and "no task 'no_such_task'" in r.stderr and "bucketed.grad_ready" in r.stderr
    r = run_checker("hint", "lab2", "load_checkpoint", "--root", learner_tree, timeout=60)
    assert r.returncode == 0  # one task ends with it in lab 2
    r = run_checker("hint", "lab2", "finish_gradient_synchronization", "--root", learner_tree, timeout=60)
    assert r.returncode == 2 and "fits 2 tasks" in r.stderr
    before = hints.opened(learner_tree / "labs/lab2_ddp")
    (learner_tree / "labs" / hints.OFF).write_text("graded class: no hints until Friday\n")
    r = run_checker("hint", "lab2", "grad_ready", "--root", learner_tree, timeout=60)
    assert r.returncode == 2 and "no hints: graded class: no hints until Friday" in r.stderr
    assert hints.opened(learner_tree / "labs/lab2_ddp") == before and "bucketed.grad_ready" not in before


def test_the_notebook_panel_opens_nothing_until_pressed_then_one_tier_per_press(learner_tree):
    from labs.notebook.hints import hint_panel

    task = next(t for t in TASKS["lab2"] if t["name"].endswith("grad_ready"))
    panel = hint_panel("lab2", lambda lab: hints.tasks(learner_tree, lab),
                       lambda lab, name: hints.reveal(learner_tree, lab, name))
    (pick, button), shown = panel.children[0].children, panel.children[1]
    pick.value = task["name"]
    assert "must hold" in shown.value and not (learner_tree / "labs/lab2_ddp" / hints.OPENED).exists()
    button.click()
    button.click()
    assert hints.opened(learner_tree / "labs/lab2_ddp")[task["name"]]["tier"] == 2
    assert "hint 2" in shown.value and "hint 3" not in shown.value and "1 more tier" in shown.value
    assert "no hints here" in repr(hint_panel("lab2", lambda lab: (_ for _ in ()).throw(RuntimeError("off")), None))


@pytest.mark.parametrize("notebook", sorted((ROOT / "labs").glob("lab*/*.ipynb")), ids=lambda p: p.parent.name)
def test_every_notebook_offers_the_hints_of_its_own_lab(notebook):
    code = "".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code")
    assert f'hint_panel("{notebook.stem}", hint_tasks, open_hint)' in code


def test_no_learners_hint_progress_ships_with_the_course():
    """A .hints-opened.json committed with the course makes every newcomer's first `checker hint` skip a tier."""
    import subprocess

    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    assert not [f for f in tracked if f.endswith(hints.OPENED)]
