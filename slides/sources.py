"""Code on slides, read from the real files at build time: `::: code SRC` and `::: diff OLD NEW`.

SRC is a path from the repository root, optionally narrowed:
    PATH::name          a function or class (`Class.method` for a method), decorators included
    PATH#L10-24         a range of lines
    PATH#solution2      the 2nd `# BEGIN SOLUTION` ... `# END SOLUTION` block: what the learner writes
and optionally prefixed `starter:` for the starter `make starters` writes from a solution file (lab 4: the
faulty code). Solution files are otherwise shown as the reference runs: without the BEGIN/END SOLUTION
marker lines and without the commented-out starter code after `# STARTER`.
"""
from __future__ import annotations

import ast
import difflib
import html
import re
import textwrap
from pathlib import Path

from checker.starters import BEGIN, END, STARTER, strip_solutions

ROOT = Path(__file__).resolve().parents[1]
LONG_BLOCK = 30  # lines of code or diff one slide shows legibly


def solution_view(text: str) -> str:
    """A solution file as the reference runs: marker lines and commented-out starter code removed."""
    out, starter = [], False
    for line in text.splitlines(keepends=True):
        if BEGIN.match(line) or END.match(line):
            starter = False
        elif STARTER.match(line):
            starter = True
        elif not starter:
            out.append(line)
    return "".join(out)


def solution_block(text: str, n: int, where: str) -> str:
    """The reference lines of the n-th BEGIN SOLUTION block (1-based), starter lines left out."""
    blocks, cur, starter = [], None, False
    for line in text.splitlines(keepends=True):
        if BEGIN.match(line):
            cur, starter = [], False
        elif cur is not None and END.match(line):
            blocks.append("".join(cur))
            cur = None
        elif cur is not None and STARTER.match(line):
            starter = True
        elif cur is not None and not starter:
            cur.append(line)
    if not 1 <= n <= len(blocks):
        raise LookupError(f"{where} has {len(blocks)} solution blocks, not a #{n}")
    return blocks[n - 1]


def definition(text: str, name: str, where: str, docstring: bool = True) -> str:
    """The source of function/class `name` (dotted for methods), decorators included; its docstring optional."""
    body, node = ast.parse(text).body, None
    for part in name.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise LookupError(f"{where} has no {name}")
        body = node.body
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines = text.splitlines(keepends=True)
    if docstring or ast.get_docstring(node, clean=False) is None:
        return "".join(lines[start - 1:node.end_lineno])
    doc = node.body[0]
    return "".join(lines[start - 1:doc.lineno - 1] + lines[doc.end_lineno:node.end_lineno])


def load(spec: str, docstrings: bool = True) -> tuple[str, str]:
    """(label, text) of SRC. FileNotFoundError or LookupError when the file or the name is not there."""
    starter = spec.startswith("starter:")
    spec = spec.removeprefix("starter:")
    m = re.match(r"^(?P<path>.+?)(?:::(?P<name>[\w.]+)|#L(?P<lines>\d+(?:-\d+)?)|#solution(?P<block>\d+))?$", spec)
    file = (ROOT / m["path"]).resolve()
    if not file.is_file():
        raise FileNotFoundError(m["path"])
    text = file.read_text()
    rel = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else str(file)
    if starter:
        lab = re.search(r"\b(lab\d+)_", rel)
        text = strip_solutions(text, lab[1] if lab else "lab", rel)
    elif m["block"]:
        return f"{rel}#solution{m['block']}", textwrap.dedent(solution_block(text, int(m["block"]), rel))
    elif re.search(r"^\s*# BEGIN SOLUTION", text, re.M):
        text = solution_view(text)
    label = ("starter of " if starter else "") + rel
    if m["name"]:
        return f"{label}::{m['name']}", textwrap.dedent(definition(text, m["name"], rel, docstrings))
    if m["lines"]:
        lo, _, hi = m["lines"].partition("-")
        return f"{label}#L{m['lines']}", "".join(text.splitlines(keepends=True)[int(lo) - 1:int(hi or lo)])
    return label, text


def _pre(lines: list[tuple[str, str]], kind: str, where: str, warnings: list) -> str:
    if len(lines) > LONG_BLOCK:
        warnings.append(f"{where}: {kind} of {len(lines)} lines: pick a function, a solution block or a line range")
    body = "".join(f'<span class="{c}">{html.escape(t)}</span>' if c else f"<span>{html.escape(t)}</span>"
                   for c, t in lines)  # a block per line (page.py's CSS): wrapped lines keep their colour
    return f'<pre class="{kind}"><code>{body}</code></pre>'


def diff_html(old: str, new: str, context: int, docstrings: bool, where: str, warnings: list) -> str:
    """A unified diff of two SRCs as they are now, lines coloured by what happened to them."""
    (la, a), (lb, b) = load(old, docstrings), load(new, docstrings)
    out = list(difflib.unified_diff(a.splitlines(), b.splitlines(), la, lb, n=context, lineterm=""))
    if not out:
        return f'<p class="note">{html.escape(la)} and {html.escape(lb)} are identical</p>'
    cls = {"+": "add", "-": "del", "@": "hunk"}
    return _pre([("file", t) if i < 2 else (cls.get(t[:1], ""), t) for i, t in enumerate(out)], "diff", where, warnings)


def code_html(src: str, docstrings: bool, where: str, warnings: list) -> str:
    label, text = load(src, docstrings)
    return (f'<div class="src">{html.escape(label)}</div>'
            + _pre([("", t) for t in text.rstrip("\n").splitlines()], "code", where, warnings))
