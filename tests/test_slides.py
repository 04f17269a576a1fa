"""The slide decks: one per lab, they build, they load nothing from outside, and what they show is
generated from bench/results.json and the real code at build time, never typed in."""
from __future__ import annotations

import ast
import copy
import html
import json
import re
import sys
import time

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT))
from slides import build  # noqa: E402

RESULTS = json.loads((ROOT / "bench" / "results.json").read_text())
# Anything that would make a browser fetch from elsewhere: written here independently of the builder's own guard.
OUTSIDE = [re.compile(p, re.I) for p in (r"""\b(?:src|href|srcset|poster|action)\s*=\s*["']?\s*(?:https?:)?//""",
                                         r"""url\(\s*["']?\s*(?:https?:)?//""", r"@import", r"<link\b", r"<iframe\b")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    t0 = time.perf_counter()
    assert build.main(["--out", str(out)]) == 0
    print(f"every deck built in {time.perf_counter() - t0:.1f} s")
    return out


def lab_numbers() -> list[str]:
    return sorted(re.match(r"lab(\d+)_", p.name)[1] for p in (ROOT / "labs").iterdir()
                  if p.is_dir() and re.match(r"lab\d+_", p.name))


def test_every_lab_has_a_deck_that_builds_titled_by_its_first_heading(built):
    assert lab_numbers(), "no lab folders found under labs/"
    index = (built / "index.html").read_text()
    for n in lab_numbers():
        assert (ROOT / "slides" / f"lab{n}.md").exists(), f"labs/lab{n}_* has no slides/lab{n}.md"
        page = (built / f"lab{n}.html").read_text()
        title = html.unescape(re.search(r"<title>(.*?)</title>", page)[1])
        first_h1 = html.unescape(re.search(r"<h1>(.*?)</h1>", page)[1])
        assert title == first_h1 and title.startswith(f"Lab {n} — "), (title, first_h1)
        assert len(re.findall(r'<section class="slide', page)) >= 5
        assert f'href="lab{n}.html"' in index


def test_decks_load_nothing_from_outside(built):
    for page in sorted(built.glob("*.html")):
        text = page.read_text()
        for pattern in OUTSIDE:
            assert not pattern.search(text), f"{page.name}: {pattern.pattern} matches"
        for src in re.findall(r"""\bsrc\s*=\s*["']([^"']*)""", text):
            assert src.startswith("data:"), f"{page.name} loads {src[:60]}"


def test_a_deck_that_links_outside_is_refused(tmp_path):
    deck = tmp_path / "lab9.md"
    deck.write_text("# Lab 9 — test\n\n![a picture](https://example.com/a.png)\n")
    with pytest.raises(build.BuildError, match="outside"):
        build.build_deck(deck, RESULTS)


def test_values_and_figures_follow_results_json(tmp_path):
    tiny = next(m for m in RESULTS["models"] if m["config"] == "tiny")
    changed = copy.deepcopy(RESULTS)
    next(m for m in changed["models"] if m["config"] == "tiny")["model_state_bytes"] = 1234567
    del changed["lab6"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(changed))
    assert build.main(["--lab", "lab1", "--lab", "lab6", "--results", str(path), "--out", str(tmp_path / "a")]) == 0
    assert build.main(["--lab", "lab1", "--results", str(ROOT / "bench" / "results.json"),
                       "--out", str(tmp_path / "b")]) == 0
    new, old = (tmp_path / "a" / "lab1.html").read_text(), (tmp_path / "b" / "lab1.html").read_text()
    measured = "steps: <strong>{:,} B</strong>"  # lab1.md: "counted from the tensors after real steps: **{{...}} B**"
    assert measured.format(1234567) in new and measured.format(tiny["model_state_bytes"]) not in new
    assert measured.format(tiny["model_state_bytes"]) in old
    lab6 = (tmp_path / "a" / "lab6.html").read_text()  # a section never measured: placeholders, no numbers
    assert lab6.count("Not measured yet") >= 4 and "not measured yet: run make bench" in lab6
    assert "data:image/png" not in lab6.split("Pipeline parallel")[1]


def test_the_lab8_deck_builds_from_a_bench_run_without_root(tmp_path):
    """Without root there is no veth: no link bytes, hsdp_internode_bytes NOT RUN, no link speeds. The deck shows
    placeholders where those go, and everything else."""
    changed = copy.deepcopy(RESULTS)
    grade = changed["lab8"]["grade"]
    grade["info"] = {"nodes": "both nodes on this machine's loopback (emulated: not root)"}
    grade["checks"]["hsdp_internode_bytes"] = None
    changed["lab8"]["speeds"] = {"not_run": "no network namespaces here: run as root"}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(changed))
    assert build.main(["--lab", "lab8", "--results", str(path), "--out", str(tmp_path / "a")]) == 0
    deck = (tmp_path / "a" / "lab8.html").read_text()
    assert deck.count("Not measured yet") == 2 and "NOT RUN" in deck
    assert f"{grade['checks']['elastic_recovery']:.1f} s from the kill" in deck


def test_a_wrong_path_in_a_measured_section_is_an_error(tmp_path):
    deck = tmp_path / "lab9.md"
    deck.write_text("# Lab 9 — test\n\ntiny: {{ pick(models, config=\"tiny\").tokens_per_sec }}\n")
    with pytest.raises(build.BuildError, match=r"lab9.md:3: .*tokens_per_sec"):
        build.build_deck(deck, RESULTS)


def test_diffs_show_the_current_code(tmp_path):
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text("def step(x):\n    y = x + 1\n    return y\n")
    new.write_text("def step(x):\n    y = x + 1\n    return y * 2\n")
    deck = tmp_path / "lab9.md"
    deck.write_text(f"# Lab 9 — test\n\n---\n\n::: diff {old}::step {new}::step\n")
    first = build.build_deck(deck, RESULTS)[0].html
    assert html.escape("+    return y * 2") in first and html.escape("-    return y") in first
    new.write_text("def step(x):\n    y = x + 1\n    return y - 3  # changed\n")
    second = build.build_deck(deck, RESULTS)[0].html
    assert html.escape("+    return y - 3  # changed") in second and "return y * 2" not in second


def test_the_lab2_deck_diffs_the_real_train_steps(built):
    page = html.unescape((built / "lab2.html").read_text())
    for path in ("solutions/lab1_baseline/step.py", "solutions/lab2_ddp/step.py"):
        src = (ROOT / path).read_text()
        fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "train_step")
        lines = src.splitlines()
        for stmt in fn.body[1:]:  # every statement after the docstring, as the file has it now
            assert lines[stmt.lineno - 1] in page, f"{path}:{stmt.lineno} is not on the lab 2 slides"


def test_an_unknown_lab_is_bad_usage(tmp_path, capsys):
    assert build.main(["--lab", "lab42", "--out", str(tmp_path)]) == 2
    assert "no deck for lab42" in capsys.readouterr().err
