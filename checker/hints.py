"""Hints on demand: each learner task's tiers, revealed one at a time, and which tiers a learner has opened.

    checker hint lab2                    # the lab's tasks, each with its contract and the tiers opened so far
    checker hint lab2 grad_ready         # the next tier of that task (a unique part of its name will do)

The tiers are written from solutions/ by checker/starters.py into labs/<lab folder>/hints.json: 1 = the concept
and the question to ask yourself, 2 = the shape of the solution (which collective, which hook), 3 = the recipe.
They are stored encoded (zlib + base64) only so that a glance at the file does not give a tier away; the file
is no secret. What a learner has opened is kept in their own tree, labs/<lab folder>/.hints-opened.json, so it
travels with a submission and batch grading can report it (checker/batch.py). An instructor turns hints off
for a class by handing out the course with a file labs/.hints-off (its text is what `checker hint` then says).
"""
from __future__ import annotations

import base64
import json
import os
import time
import zlib
from pathlib import Path

from checker import seams

FILE = "hints.json"
OPENED = ".hints-opened.json"
OFF = ".hints-off"  # in labs/: hints are off for this class
TIER_NAMES = {1: "the concept", 2: "the shape of the solution", 3: "the recipe"}


def _encode(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode(), 9)).decode()


def _decode(blob: str) -> str:
    return zlib.decompress(base64.b64decode(blob)).decode()


def dumps(lab: str, tasks: list[dict]) -> str:
    """The hints file's text for one lab: each task's name, file, line and contract plain, its tiers encoded."""
    rows = [{"name": t["name"], "file": t["file"], "line": t["line"], "contract": t["contract"],
             "tiers": [_encode(x) for x in t["tiers"]]} for t in tasks]
    return json.dumps({"lab": lab, "generated_by": "make starters (checker/starters.py) from solutions/",
                       "tasks": rows}, indent=1) + "\n"


def load(path: Path) -> dict:
    """A hints file, its tiers decoded."""
    return loads(Path(path).read_text())


def loads(text: str) -> dict:
    """A hints file's text, its tiers decoded."""
    data = json.loads(text)
    for t in data["tasks"]:
        t["tiers"] = [_decode(x) for x in t["tiers"]]
    return data


def folder(root: Path, lab: str) -> Path:
    """The learner's lab folder in the tree rooted at `root` (the one holding labs/)."""
    return Path(root) / "labs" / seams.SEAMS[lab].folder


def tasks(root: Path, lab: str) -> list[dict]:
    path = folder(root, lab) / FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: this lab has no hints here (`make starters` writes them)")
    return load(path)["tasks"]


def opened(lab_folder: Path) -> dict[str, dict]:
    """{task: {"tier": highest tier opened, "at": [UTC times each tier was opened]}} from a learner's lab folder;
    {} when none was opened (or the file is unreadable: it is the learner's own)."""
    try:
        data = json.loads((Path(lab_folder) / OPENED).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("tier"), int)}


def off(root: Path) -> str | None:
    """Why hints are off in this tree, or None when they are on."""
    flag = Path(root) / "labs" / OFF
    if not flag.exists():
        return None
    text = flag.read_text().strip()
    return text or "hints are turned off for this class by your instructor"


def find(all_tasks: list[dict], query: str) -> dict:
    """The task named `query`: its whole name, or the one task whose name ends with it, or starts with it."""
    by_name = {t["name"]: t for t in all_tasks}
    if query in by_name:
        return by_name[query]
    for rule in (lambda n: n.endswith("." + query) or n.endswith(query), lambda n: n.startswith(query)):
        hits = [t for t in all_tasks if rule(t["name"])]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise LookupError(f"'{query}' fits {len(hits)} tasks: {', '.join(t['name'] for t in hits)}; name one")
    raise LookupError(f"no task '{query}'; this lab's: {', '.join(by_name)}")


def reveal(root: Path, lab: str, query: str) -> tuple[dict, int]:
    """Open the next tier of a task (the last one stays open once reached); returns the task and how many of its
    tiers are now open. The learner's progress file is replaced whole."""
    task = find(tasks(root, lab), query)
    lab_folder = folder(root, lab)
    progress = opened(lab_folder)
    row = progress.get(task["name"], {"tier": 0, "at": []})
    if row["tier"] < len(task["tiers"]):
        row = {"tier": row["tier"] + 1, "at": [*row.get("at", []), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())]}
        progress[task["name"]] = row
        tmp = lab_folder / f"{OPENED}.tmp"
        tmp.write_text(json.dumps(progress, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, lab_folder / OPENED)
    return task, row["tier"]


def summary(lab_folder: Path, course_folder: Path | None = None) -> str:
    """One line for a class report: which tiers a learner opened, e.g. 'bucketed.grad_ready 2/3, step 1/3' (the
    totals from the course's own hints file when given, else the learner's copy)."""
    path = Path(course_folder or lab_folder) / FILE
    total = {t["name"]: len(t["tiers"]) for t in load(path)["tasks"]} if path.exists() else {}
    return ", ".join(f"{name} {row['tier']}/{total.get(name, '?')}" for name, row in sorted(opened(lab_folder).items()))
