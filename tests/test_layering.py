"""The layout's import rules, read from the code: the training core stands alone, instruments measure without
knowing the UI, learner code never reaches into the grader, and notebooks use only checker.api."""
import ast
import json

import pytest

from conftest import ROOT

# package (a folder) -> the top-level names its modules must not import
FORBIDDEN = {
    "labs/common": ("labs.instruments", "labs.notebook", "checker", "solutions"),
    "labs/instruments": ("labs.notebook", "checker", "solutions"),
    "labs/notebook": ("checker", "solutions"),
    "solutions": ("checker", "labs.notebook"),
    "checker": ("labs.notebook",),
}


def imports(source: str, package: str = "") -> set[str]:
    """Every module a piece of code imports, relative imports resolved against `package`."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("folder", FORBIDDEN)
def test_each_layer_imports_only_what_is_below_it(folder):
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT)
        package = ".".join(rel.with_suffix("").parts[:-1])
        for module in imports(path.read_text(), package):
            if within(module, FORBIDDEN[folder]):
                bad.append(f"{rel} imports {module}")
    assert not bad, "\n".join(bad)


def test_learner_starters_import_no_grader():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in sorted((ROOT / "labs").glob("lab*/*.py"))
           for m in imports(p.read_text(), ".".join(p.relative_to(ROOT).with_suffix("").parts[:-1]))
           if within(m, ("checker", "solutions", "labs.notebook"))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("notebook", sorted((ROOT / "labs").glob("lab*/*.ipynb")), ids=lambda p: p.parent.name)
def test_notebooks_reach_the_checker_only_through_its_api(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
    used = {m for m in imports(code) if within(m, ("checker",))}
    assert used <= {"checker.api"} | {f"checker.api.{n}" for n in _api_names()}, sorted(used)


def _api_names() -> list[str]:
    from checker import api

    return api.__all__


def _module_graph(*parts: str) -> dict[str, set[str]]:
    """{module: the course modules it imports, at any level (a function's import counts: it is still a
    dependency)} over the given folders."""
    mods = {}
    for part in parts:
        for p in (ROOT / part).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = p
    graph = {}
    for name, p in mods.items():
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in imports(p.read_text(), package) if m in mods and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """One concept per file, and no two files that need each other: a file cut in two to fit a length, whose
    halves import each other, is one concept in two places."""
    circles = _cycles(_module_graph("checker", "labs/common", "labs/instruments", "labs/notebook", "solutions"))
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, ())
    return seen


@pytest.mark.parametrize("package", sorted(p.parent.name for p in (ROOT / "checker" / "labs").glob("lab*/tasks.py")))
def test_a_labs_worker_side_never_reaches_its_checks(package):
    """The worker side (tasks.py and what it imports) runs next to the learner's code: it holds no threshold and
    no evaluator, so it never reaches checks.py or plan.py; and the parent side never imports tasks.py (what both
    need, a run's shape, lives in a module of its own)."""
    graph = _module_graph("checker", "labs/common", "labs/instruments")
    base = f"checker.labs.{package}"
    worker = _reach(graph, f"{base}.tasks")
    assert not worker & {f"{base}.checks", f"{base}.plan"}, sorted(worker)
    assert f"{base}.tasks" not in _reach(graph, f"{base}.plan")
    assert {f"{base}.checks", f"{base}.plan", f"{base}.tasks"} <= set(graph), "a lab package has all three sides"
