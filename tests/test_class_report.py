"""What an instructor reads in a class report: a hang, a TODO not written and a wrong value look different;
a hang says where in the learner's own code it was; every failure's message and hint are in plain sight (class.html
without hovering, class.csv's columns, the printed line)."""
import csv
import json
import re
from xml.etree import ElementTree as ET

from checker import batch
from checker.labs._common import Check, error_result
from checker.report import CheckResult, LabReport, learner_frames

CHECK = Check("grad_equivalence", "what", "Average, don't sum: divide the all-reduced sum by the world size.")

# faulthandler's dump of a hung rank (innermost first, one block per thread), as harness._kill collects it: the
# learner's frames sit between torch's and the checker's, and the course's shared core is not the learner's
DUMP = """Thread 0x00007f1 (most recent call first):
  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce
  File "/tmp/checker-batch-lab2-x/ed/tree/labs/lab2_ddp/naive.py", line 41 in sync_grads
  File "/tmp/checker-batch-lab2-x/ed/tree/labs/common/train.py", line 12 in step
  File "/tmp/checker-batch-lab2-x/ed/tree/labs/lab2_ddp/step.py", line 30 in train_step
  File "/work/course/checker/worker.py", line 88 in main

Thread 0x00007f2 (most recent call first):
  File "/work/course/checker/watchdog.py", line 40 in loop
"""
# Python's own traceback of the watchdog's Stuck (outermost first)
TRACE = """  File "/work/course/checker/worker.py", line 88, in main
    task()
  File "/home/a/labs/lab2_ddp/step.py", line 30, in train_step
    sync_grads(model)
  File "/home/a/labs/lab2_ddp/naive.py", line 44, in sync_grads
    while True:
"""


def test_the_learners_own_frames_of_a_hang_innermost_first():
    assert learner_frames(DUMP, "lab2_ddp") == ["labs/lab2_ddp/naive.py:41 in sync_grads",
                                                "labs/lab2_ddp/step.py:30 in train_step"]
    assert learner_frames(TRACE, "lab2_ddp") == ["labs/lab2_ddp/naive.py:44 in sync_grads",
                                                 "labs/lab2_ddp/step.py:30 in train_step"]
    assert learner_frames(TRACE, "lab1_baseline") == []  # another lab's folder is not this learner's code


def test_a_hang_a_todo_and_an_error_are_told_apart_in_the_json_report():
    hung = error_result(CHECK, {"type": "Timeout", "message": "no result within 60 s", "stacks": DUMP})
    stuck = error_result(CHECK, {"type": "Stuck", "message": "naive.py:44 ran 10 s", "traceback": TRACE,
                                 "where": "labs/lab2_ddp/naive.py:44 in sync_grads"})
    todo = error_result(CHECK, {"type": "NotImplementedError", "message": "TODO(lab2)", "todo": "TODO(lab2)",
                                "where": "labs/lab2_ddp/naive.py:40 in sync_grads"})
    raised = error_result(CHECK, {"type": "ValueError", "message": "bad", "traceback": TRACE})
    wrong = CheckResult("grad_equivalence", False, 2.0, 1e-6, "max abs diff", "gradients differ", CHECK.hint)
    rep = LabReport("lab2", "labs", "cpu", 2, 1.0, [hung, stuck, todo, raised, wrong]).to_json()
    got = [(c["cause"], c["frames"][:1]) for c in rep["checks"]]
    assert got == [("hang", ["labs/lab2_ddp/naive.py:41 in sync_grads"]),
                   ("hang", ["labs/lab2_ddp/naive.py:44 in sync_grads"]), ("todo", []),
                   ("error", ["labs/lab2_ddp/naive.py:44 in sync_grads"]), ("", [])]
    assert "-v" in hung.message and "class report" in hung.message  # where to find the stacks, both ways


def _reports():
    def check(name, passed, cause="", frames=(), message="", status=None):
        return {"name": name, "passed": passed, "value": 0.5 if cause == "" else None, "threshold": 1e-6,
                "unit": "max abs diff", "message": message, "hint": f"hint of {name}: {CHECK.hint}",
                "status": status or ("pass" if passed else "fail"), "cause": cause, "frames": list(frames)}
    return {
        "ada": {"passed": True, "seconds": 20, "checks": [check("a", True), check("b", True)]},
        "cy": {"passed": False, "seconds": 5, "checks": [check("a", False, "todo", message="not written yet: T1"),
                                                         check("b", False, "todo", message="not written yet: T2")]},
        "ed": {"passed": False, "seconds": 189, "checks": [
            check("a", False, "hang", ["labs/lab2_ddp/naive.py:44 in sync_grads", "labs/lab2_ddp/step.py:30 in s"],
                  message="Stuck: naive.py:44 ran 10 s"), check("b", True)]},
        "gus": {"passed": False, "seconds": 4, "checks": [check("a", False, "todo", message="not written yet: T3"),
                                                          check("b", False, "todo", message="not written yet: T3")]},
        "fa": {"passed": False, "seconds": 21, "checks": [check("a", False, message="gradients summed, not averaged"),
                                                          check("b", False, status="not_run", message="no GPU")]},
    }


def _visible(page: str) -> str:
    """What a reader sees without hovering: the page's text, title attributes and tags gone."""
    return re.sub(r"<[^>]+>", " ", re.sub(r'title="[^"]*"', "", page))


def test_class_html_shows_a_hang_apart_from_a_todo_and_every_hint_without_hovering(tmp_path):
    batch.write_reports("lab2", 7, _reports(), tmp_path)
    page = (tmp_path / "class.html").read_text()
    cells = dict(re.findall(r'<td class="(pass|fail|todo|hang|notrun)" title="[^"]*">(.*?)</td>', page))
    assert cells == {"pass": "✓ 0.5", "todo": "TODO", "hang": "<b>hung</b>", "fail": "✗ 0.5", "notrun": "NOT RUN"}
    seen = _visible(page)
    assert "gradients summed, not averaged" in seen and "hint of a: Average, don" in seen
    assert "labs/lab2_ddp/naive.py:44 in sync_grads" in seen and "not written yet: T2" in seen
    assert "no GPU" not in seen.split("What each learner needs")[1]  # NOT RUN is not something the learner needs
    assert "ada" not in seen.split("What each learner needs")[1]  # nothing to say to a learner who passed
    gus = seen.split("What each learner needs")[1].split(" gus ")[1]  # one TODO that stops two checks: one row
    assert gus.count("not written yet: T3") == 1 and "a, b: TODO" in gus and "both checks run it" in gus
    assert "http" not in page  # still self-contained


def test_class_csv_and_json_carry_hint_cause_and_frames(tmp_path):
    batch.write_reports("lab2", 7, _reports(), tmp_path)
    rows = {(r["learner"], r["check"]): r for r in csv.DictReader(open(tmp_path / "class.csv"))}
    assert rows[("fa", "a")]["hint"].startswith("hint of a: Average, don't sum")
    assert rows[("ada", "a")]["hint"] == ""  # nothing to do
    assert (rows[("ed", "a")]["cause"], rows[("cy", "a")]["cause"], rows[("fa", "a")]["cause"]) == ("hang", "todo", "")
    assert rows[("ed", "a")]["frames"] == "labs/lab2_ddp/naive.py:44 in sync_grads; labs/lab2_ddp/step.py:30 in s"
    data = json.loads((tmp_path / "class.json").read_text())
    assert data["reports"]["ed"]["checks"][0]["frames"][0] == "labs/lab2_ddp/naive.py:44 in sync_grads"
    failure = ET.parse(tmp_path / "class.junit.xml").getroot().find("testsuite[@name='ed']/testcase/failure")
    assert failure.get("type") == "hang" and failure.text.startswith("at labs/lab2_ddp/naive.py:44")


def test_the_printed_lines_say_hung_and_not_written_and_what_a_hang_cost():
    reps = _reports()
    assert batch.learner_line("ed", reps["ed"]).endswith("; hung: a (labs/lab2_ddp/naive.py:44 in sync_grads)")
    assert "; not written yet: a, b" in batch.learner_line("cy", reps["cy"])
    plain = batch.learner_line("fa", reps["fa"])
    assert "hung" not in plain and "not written" not in plain
    detail = batch.learner_details(reps["ed"])
    assert detail[:2] == ["a: Stuck: naive.py:44 ran 10 s", "  at labs/lab2_ddp/naive.py:44 in sync_grads"]
    said = batch.hang_summary(reps, wall=237, parallel=1)
    assert "ed 189 s" in said and "237 s" in said and "--learner-budget" in said and "--parallel" in said
    assert batch.hang_summary({"ada": reps["ada"], "fa": reps["fa"]}, 50, 1) == ""  # no hang, nothing said
    assert "nobody else is graded" in batch.hang_cost_note(1, 600) and "600 s" in batch.hang_cost_note(1, 600)
    assert "other 3 slot(s)" in batch.hang_cost_note(4, 240)
