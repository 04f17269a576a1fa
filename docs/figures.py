"""The measured figures docs/workshop.md quotes, generated from bench/results.json as the slides' are.

    .venv/bin/python docs/figures.py            # rewrite every generated block of docs/workshop.md
    .venv/bin/python docs/figures.py --check    # exit 1 naming the blocks that differ (tests/test_docs.py)
    .venv/bin/python docs/figures.py --results other.json   # against another results file

A generated block is its template in an HTML comment, then what the template gives, then a closing comment:

    <!-- figures: TEMPLATE (any lines with {{ EXPR | SPEC }}, the slides' syntax: slides/build.py) -->
    what TEMPLATE gives for bench/results.json
    <!-- /figures -->

so the template sits beside its numbers in the one file, and a rendered page shows only the numbers. A section
never measured becomes "not measured yet (`make bench`)", never a number; a wrong path is an error (exit 2).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: `python docs/figures.py`
    sys.path.insert(0, str(ROOT))

from slides import figures  # noqa: E402
from slides.build import INLINE, evaluate  # noqa: E402

DOCS = [ROOT / "docs" / "workshop.md"]
RESULTS = ROOT / "bench" / "results.json"
BLOCK = re.compile(r"(?P<open><!-- figures:(?P<template>.*?)-->\n)(?P<body>.*?)(?P<close><!-- /figures -->)", re.S)


def expand(template: str, results: dict, where: str) -> str:
    """TEMPLATE with each {{ EXPR | SPEC }} replaced by its value in `results` (plain text, for markdown)."""
    def value(m):
        expr, _, spec = m[1].partition("|")
        try:
            return format(evaluate(expr, results), spec.strip())
        except figures.NotMeasured:
            return "not measured yet (`make bench`)"
        except (KeyError, IndexError, TypeError, ValueError, SyntaxError) as e:
            raise ValueError(f"{where}: {{{{{m[1]}}}}}: {type(e).__name__}: {e}") from None
    return INLINE.sub(value, template)


def render(text: str, results: dict, name: str) -> str:
    """The document with every generated block's body made from its template."""
    def block(m):
        line = text[:m.start()].count("\n") + 1
        body = expand(m["template"].strip("\n"), results, f"{name}:{line}").strip("\n")
        return f"{m['open']}{body}\n{m['close']}"
    return BLOCK.sub(block, text)


def stale(results: dict, docs: list[Path] = DOCS) -> list[str]:
    """The documents whose generated blocks differ from what `results` gives."""
    return [str(p.relative_to(ROOT)) for p in docs if render(p.read_text(), results, p.name) != p.read_text()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a document is out of date")
    ap.add_argument("--results", default=str(RESULTS), help="the results file (default bench/results.json)")
    args = ap.parse_args(argv)
    results = json.loads(Path(args.results).read_text())
    try:
        if args.check:
            out = stale(results)
            for name in out:
                print(f"{name}: its figures differ from {args.results}: run python docs/figures.py")
            return 1 if out else 0
        for p in DOCS:
            p.write_text(render(p.read_text(), results, p.name))
            print(f"wrote {p.relative_to(ROOT)}")
    except ValueError as e:
        print(f"docs/figures.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
