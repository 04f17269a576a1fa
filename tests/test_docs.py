"""The claims in docs and docstrings that drift as the code moves: every module of labs/common, labs/instruments
and labs/notebook is listed in its package docstring; every relative link, anchor and cited README section
resolves; no file cites a document the repository does not hold; what is said about the checker's ports is what
spawn.free_port does."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from checker import spawn
from conftest import ROOT


def tracked(*patterns: str) -> list:
    out = subprocess.run(["git", "ls-files", "--", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    here = Path(__file__).resolve()  # this file quotes the very patterns it looks for
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file() and ROOT / line != here]


def headings(md) -> list[str]:
    """A markdown file's headings, outside code blocks."""
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    return [h.strip() for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


@pytest.mark.parametrize("package", ["common", "instruments", "notebook"])
def test_each_shared_package_docstring_lists_every_module(package):
    import importlib

    doc = importlib.import_module(f"labs.{package}").__doc__
    listed = {m.group(1) for line in doc.splitlines() if (m := re.match(r"([a-z_]+) +\S", line))}
    modules = {p.stem for p in (ROOT / "labs" / package).glob("*.py") if p.stem != "__init__"}
    assert modules - listed == set(), f"labs/{package}/__init__.py does not list {sorted(modules - listed)}"
    assert listed - modules == set(), f"it lists modules that are not there: {sorted(listed - modules)}"


@pytest.mark.parametrize("md", tracked("*.md"), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(md):
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # http:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in {slug(h) for h in headings(dest)}:
            broken.append(f"{target}: {dest.name} has no heading with that anchor")
    assert not broken, broken


# A README section cited by name: `README, "CPU and GPU"`, `the lab README's 'What the checker calls'`,
# `README.md`, *The arithmetic*`, `the lab README under "What the checker calls"`.
CITATION = re.compile(r"""README(?:\.md)?`?(?:'s)?(?:,| under)? ["'*“]([A-Z][^"'*”\n]{2,60})["'*”]""")


def test_every_cited_readme_section_exists():
    lab_readmes = sorted(ROOT.glob("labs/lab*/README.md"))
    cited = []
    for f in tracked("*.py", "*.md", "*.toml", "*.ipynb", "Makefile", ".ci/run"):
        for m in CITATION.finditer(f.read_text(errors="replace")):
            name, line = m[1], f.read_text()[:m.start()].count("\n") + 1
            context = f.read_text()[max(0, m.start() - 20):m.start()]
            folder = re.search(r"([\w.-]+(?:/[\w.-]+)*)/$", context)  # `labs/lab7_memory/README.md, 'On a GPU'`
            if folder and (ROOT / folder[1] / "README.md").exists():  # the README the citation names by its path
                where = [[ROOT / folder[1] / "README.md"]]
            elif "lab README" in context + m[0]:  # every lab's README must have it
                where = lab_readmes
            else:  # the README of the file's own folder (a lab's) or the top-level one
                own = next((p / "README.md" for p in f.parents if (p / "README.md").exists()), ROOT / "README.md")
                where = [[own, ROOT / "README.md"]]
            cited.append(name)
            for readme in where:
                options = readme if isinstance(readme, list) else [readme]
                assert any(h.startswith(name) for r in options for h in headings(r)), (
                    f"{f.relative_to(ROOT)}:{line} cites {name!r}, a heading of none of "
                    f"{[str(r.relative_to(ROOT)) for r in options]}")
    assert {"CPU and GPU", "What the checker calls", "The arithmetic"} <= set(cited), cited  # the pattern works


def test_no_file_cites_a_document_the_repository_does_not_hold():
    names = {p.name for p in tracked("*.md")}
    missing = []
    for f in tracked("*.py", "*.md", "*.toml", "*.ipynb", "Makefile", ".ci/run", "*.sh"):
        for doc in set(re.findall(r"\b([A-Z][A-Z_-]+\.md)\b", f.read_text(errors="replace"))):  # README.md, COURSE.md
            if doc not in names:
                missing.append(f"{f.relative_to(ROOT)}: {doc}")
    assert not missing, missing


def test_what_the_docs_say_of_the_checkers_ports_is_what_free_port_does():
    port, low = spawn.free_port(), spawn._ephemeral_low()
    assert spawn.LOWEST_PORT <= port < low, (port, low)  # checked free below the OS's ephemeral range
    said_os = re.compile(r"OS-chosen port|port the OS picks|ports are always the OS", re.I)
    wrong = [str(f.relative_to(ROOT)) for f in tracked("checker/*", "README.md", "docs/*.md")
             if said_os.search(f.read_text(errors="replace"))]
    assert not wrong, f"these say the checker's ports come from the OS; spawn.free_port picks them: {wrong}"


def test_the_figures_in_docs_workshop_md_are_those_of_bench_results_json():
    """docs/workshop.md's measured figures (tokens/s, scaling, grade times) are generated from bench/results.json by
    docs/figures.py, like the slides': the committed page is what the committed results give."""
    import copy
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "docs" / "figures.py")
    docs_figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs_figures)

    results = json.loads((ROOT / "bench" / "results.json").read_text())
    assert docs_figures.stale(results) == [], "run .venv/bin/python docs/figures.py"
    page = (ROOT / "docs" / "workshop.md").read_text()
    blocks = docs_figures.BLOCK.findall(page)
    assert len(blocks) >= 2 and all("{{" in b[1] and "{{" not in b[2] for b in blocks)  # templates, then values
    tiny = next(m for m in results["models"] if m["config"] == "tiny")
    assert f"{tiny['tokens_per_s']:,} tokens/s" in page  # a figure the issue found stale, as results.json says
    grade = next(g for g in results["grades"] if g["lab"] == "lab3")
    assert f"lab 3 {grade['wall_s']:.0f} s" in page
    other = copy.deepcopy(results)  # another node's results give another page
    next(m for m in other["models"] if m["config"] == "tiny")["tokens_per_s"] = 12345
    del other["lab5"]  # never measured: said so, never a number
    again = docs_figures.render(page, other, "workshop.md")
    assert "12,345 tokens/s" in again and "not measured yet (`make bench`)" in again
    assert docs_figures.stale(other) == ["docs/workshop.md"]
