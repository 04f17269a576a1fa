"""Build the slide decks: slides/labN.md -> build/slides/labN.html, each one self-contained HTML.

    python slides/build.py                          # every deck + index.html into build/slides (make slides)
    python slides/build.py --lab lab2 --lab lab3    # only these decks (the index still lists every deck)
    python slides/build.py --results /tmp/r.json --out /tmp/decks   # against another results file

A deck is markdown (markdown-it-py, with tables). A line `---` on its own separates slides; a line `|||`
splits a slide into two columns (a heading that opens the slide spans both). The first slide's
`# Lab N — title` is the deck's title. Nothing measured and no code is typed into a deck by hand:
directives are expanded at build time from the course's own files.

    {{ EXPR }}  {{ EXPR | SPEC }}   a value from bench/results.json, formatted by format(value, SPEC).
                                    EXPR: top-level keys as names, `.key` or `["key"]` into dicts, `[i]` into
                                    lists, + - * / **, and pick(list, key=value), min, max, sum, len, round, abs:
                                    {{ pick(models, config="tiny").tokens_per_s | , }}
    ::: figure NAME [height=N]      a matplotlib figure from slides/(advanced_)figures.py as an embedded PNG, captioned
                                    with the machine, torch version and time it was measured on
    ::: table NAME                  a table from slides/(advanced_)figures.py, captioned the same way
    ::: diff OLD NEW [context=N]    a unified diff of two real files, or functions in them, as they are now
    ::: code SRC [optional]         the current text of a file or of part of it (slides/sources.py: SRC)
    ::: image PATH [height=N] [caption words]   a committed picture (docs/img/...), embedded

diff and code take docstrings=off (leave out the chosen function's docstring); `optional` renders a
placeholder when the file or name is not in this checkout; height=N caps a picture at N% of the screen.
A section not in results.json yet (lab 5 before its sweep) renders a labelled "not measured yet" panel,
never a number; a wrong path inside a section that exists is a build error (exit 2, file:line).

The HTML loads nothing from anywhere (slides/page.py: inline CSS and script; figures are data: URLs),
and the build fails if a deck would reference an external resource.
"""
from __future__ import annotations

import argparse
import ast
import base64
import html
import json
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: `python slides/build.py`
    sys.path.insert(0, str(ROOT))

from markdown_it import MarkdownIt  # noqa: E402  (markdown-it-py: in the dev extras; rich needs it too)

from slides import advanced_figures, figures, sources  # noqa: E402, F401  (advanced_figures: registers labs 7-8's)
from slides.page import page  # noqa: E402

SLIDES = ROOT / "slides"
DEFAULT_OUT = ROOT / "build" / "slides"
DEFAULT_RESULTS = ROOT / "bench" / "results.json"
TITLE = re.compile(r"^# (Lab (\d+) — .+?)\s*$", re.M)
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE = re.compile(r"\{\{(.+?)\}\}")
BLOCK = re.compile(r"^::: *(\w+)(.*)$")
OPTION = re.compile(r"^[a-z_]+=")
EXTERNAL = re.compile(r"""\b(?:src|href|srcset|poster|data|action)\s*=\s*["']?\s*(?:https?:)?//"""
                      r"""|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I)
MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


class BuildError(Exception):
    """A deck that cannot be built as written: the message names the file, the line and what is wrong."""


@dataclass
class Deck:
    name: str
    title: str
    html: str
    slides: int
    placeholders: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- {{ EXPR | SPEC }}

def pick(items, **where):
    """The first dict in `items` whose keys equal `where`: pick(models, config="tiny")."""
    for item in items:
        if all(item.get(k) == v for k, v in where.items()):
            return item
    raise KeyError(f"no entry with {where}")


FUNCTIONS = {"pick": pick, "min": min, "max": max, "sum": sum, "len": len, "round": round, "abs": abs}
BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
          ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a ** b}


def evaluate(expr: str, results: dict):
    """EXPR over results.json: a small, safe subset of Python. A top-level key that is absent raises
    NotMeasured (the section was never measured); anything else absent is a KeyError (a typo)."""
    def ev(n):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id in FUNCTIONS:
                return FUNCTIONS[n.id]
            if n.id not in results:
                raise figures.NotMeasured(f"bench/results.json has no {n.id} yet")
            return results[n.id]
        if isinstance(n, ast.Attribute):
            return ev(n.value)[n.attr]
        if isinstance(n, ast.Subscript):
            return ev(n.value)[ev(n.slice)]
        if isinstance(n, ast.BinOp) and type(n.op) in BINOPS:
            return BINOPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in FUNCTIONS:
            return FUNCTIONS[n.func.id](*map(ev, n.args), **{k.arg: ev(k.value) for k in n.keywords})
        raise ValueError(f"not allowed in a value: {ast.unparse(n)}")
    return ev(ast.parse(expr.strip(), mode="eval").body)


def value_html(text: str, results: dict, where: str, placeholders: list) -> str:
    expr, _, spec = text.partition("|")
    try:
        return html.escape(format(evaluate(expr, results), spec.strip()))
    except figures.NotMeasured as e:
        placeholders.append(f"{where}: {e}")
        return f'<span class="missing" title="{html.escape(str(e))}">not measured yet: run make bench</span>'
    except (KeyError, IndexError, TypeError, ValueError, SyntaxError) as e:
        raise BuildError(f"{where}: {{{{{text}}}}}: {type(e).__name__}: {e}") from None


# ---------------------------------------------------------------- ::: figure / table / image

def placeholder_html(head: str, message: str) -> str:
    return f'<div class="placeholder"><strong>{html.escape(head)}</strong><br>{html.escape(message)}</div>'


def _img(mime: str, data: bytes, alt: str, height: str | None) -> str:
    style = f' style="max-height:{int(height)}vh"' if height else ""
    return f'<img alt="{html.escape(alt)}"{style} src="data:{mime};base64,{base64.b64encode(data).decode()}">'


def figure_html(kind: str, name: str, opts: dict, results: dict, where: str, placeholders: list) -> str:
    registry = figures.FIGURES if kind == "figure" else figures.TABLES
    if name not in registry:
        raise BuildError(f"{where}: no {kind} {name!r} in slides/(advanced_)figures.py; "
                         f"there are: {', '.join(sorted(registry))}")
    fn, section = registry[name]
    try:
        made, caption = fn(results)
    except figures.NotMeasured as e:
        placeholders.append(f"{where}: {e}")
        return placeholder_html("Not measured yet", f"{e}: run make bench (it writes bench/results.json), "
                                                    "then make slides.")
    cap = (f'<figcaption>{html.escape(caption)}<br>'
           f'<span class="prov">{html.escape(figures.provenance(results, section))}</span></figcaption>')
    if kind == "figure":
        return f'<figure>{_img("image/png", figures.png(made), caption, opts.get("height"))}{cap}</figure>'
    header, rows = made
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f'<figure class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{cap}</figure>'


def image_html(args: list[str], opts: dict, where: str) -> str:
    path = ROOT / args[0]
    mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}.get(path.suffix.lower())
    if not path.is_file() or not mime:
        raise BuildError(f"{where}: no PNG or JPEG at {args[0]}")
    caption = " ".join(args[1:]) or args[0]
    return (f'<figure>{_img(mime, path.read_bytes(), caption, opts.get("height"))}<figcaption>{html.escape(caption)} '
            f'<span class="prov">({html.escape(args[0])})</span></figcaption></figure>')


def directive_html(kind: str, args: list[str], opts: dict, ctx: dict, where: str) -> str:
    docs = opts.get("docstrings", "on") != "off"
    try:
        if kind in ("figure", "table"):
            return figure_html(kind, args[0], opts, ctx["results"], where, ctx["placeholders"])
        if kind == "diff":
            if len(args) != 2:
                raise BuildError(f"{where}: ::: diff OLD NEW [context=N] [docstrings=off]")
            return sources.diff_html(args[0], args[1], int(opts.get("context", 3)), docs, where, ctx["warnings"])
        if kind == "code":
            return sources.code_html(args[0], docs, where, ctx["warnings"])
        if kind == "image":
            return image_html(args, opts, where)
    except (FileNotFoundError, LookupError) as e:
        if "optional" not in args:
            raise BuildError(f"{where}: ::: {kind}: {type(e).__name__}: {e}") from None
        ctx["placeholders"].append(f"{where}: {e} not in this checkout")
        return placeholder_html("Not written yet", f"{e} is not in this checkout")
    raise BuildError(f"{where}: unknown directive ::: {kind} (figure, table, diff, code, image)")


# ---------------------------------------------------------------- markdown -> slides

def split_outside_fences(lines: list[tuple[int, str]], sep: str) -> list[list[tuple[int, str]]]:
    """(line number, text) pairs grouped at separator lines `sep` that are not inside a fenced code block."""
    parts, cur, fenced = [], [], False
    for n, line in lines:
        if FENCE.match(line):
            fenced = not fenced
        if not fenced and line.strip() == sep:
            parts.append(cur)
            cur = []
        else:
            cur.append((n, line))
    parts.append(cur)
    return parts


def render_markdown(lines: list[tuple[int, str]], ctx: dict) -> str:
    """Markdown with directives: each directive becomes a placeholder word, rendered, then swapped for its HTML."""
    slots, out, fenced = {}, [], False

    def slot(markup: str) -> str:
        key = f"SLIDESLOT{ctx['next_slot']}X"
        ctx["next_slot"] += 1
        slots[key] = markup
        return key

    for n, line in lines:
        where = f"{ctx['file']}:{n}"
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else BLOCK.match(line)
        if m:
            try:
                words = shlex.split(m[2])
            except ValueError as e:  # an unbalanced quote
                raise BuildError(f"{where}: {line.strip()}: {e}") from None
            opts = dict(w.split("=", 1) for w in words if OPTION.match(w))
            out += ["", slot(directive_html(m[1], [w for w in words if not OPTION.match(w)], opts, ctx, where)), ""]
            continue
        if not fenced:
            line = INLINE.sub(lambda v, where=where: slot(value_html(v[1], ctx["results"], where, ctx["placeholders"])),
                              line)
        out.append(line)
    rendered = MD.render("\n".join(out))
    for key, markup in slots.items():
        rendered = rendered.replace(f"<p>{key}</p>", markup).replace(key, markup)
    return rendered


def render_slide(lines: list[tuple[int, str]], ctx: dict) -> str:
    cols = split_outside_fences(lines, "|||")
    if len(cols) == 1:
        return render_markdown(lines, ctx)
    first = next((i for i, (_, t) in enumerate(cols[0]) if t.strip()), None)
    head = ""
    if first is not None and cols[0][first][1].startswith("#"):  # the slide's heading spans the columns
        head = render_markdown(cols[0][:first + 1], ctx)
        cols[0] = cols[0][first + 1:]
    return head + '<div class="cols">' + "".join(f"<div>{render_markdown(c, ctx)}</div>" for c in cols) + "</div>"


def build_deck(path: Path, results: dict) -> tuple[Deck, list[str]]:
    text = path.read_text()
    number = re.sub(r"\D", "", path.stem)
    m = TITLE.search(text)
    if not m or m[2] != number:
        raise BuildError(f"{path.name}: the first slide needs the heading `# Lab {number} — <title>`")
    title = m[1]
    ctx = {"file": path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path),
           "results": results, "placeholders": [], "warnings": [], "next_slot": 0}
    sections = []
    for lines in split_outside_fences(list(enumerate(text.splitlines(), 1)), "---"):
        if any(t.strip() for _, t in lines):
            cls = "slide" if sections else "slide title"
            sections.append(f'<section class="{cls}" id="s{len(sections) + 1}">\n{render_slide(lines, ctx)}</section>')
    first_h1 = re.search(r"<h1>(.*?)</h1>", sections[0])
    if not first_h1 or html.unescape(first_h1[1]) != title:
        raise BuildError(f"{path.name}: the first slide's heading must be the deck's title, `# {title}`")
    doc = page(html.escape(title), "\n".join(sections), footer=html.escape(title))
    bad = EXTERNAL.search(doc)
    if bad:
        raise BuildError(f"{path.name}: the deck would load something from outside: "
                         f"{doc[bad.start():bad.end() + 40]!r}")
    return Deck(path.stem, title, doc, len(sections), ctx["placeholders"]), ctx["warnings"]


def index_html(titles: list[tuple[str, str]], results: dict, built: dict[str, Deck]) -> str:
    items = []
    for name, title in titles:
        d = built.get(name)
        extra = (f" — {d.slides} slides" + (f", {len(d.placeholders)} not measured yet" if d.placeholders else "")
                 if d else "")
        items.append(f'<li><a href="{name}.html">{html.escape(title)}</a><span class="prov">{extra}</span></li>')
    when = results.get("measured_at", "never: run make bench")
    body = (f'<main class="index"><h1>Distributed training, by doing it — slides</h1>'
            f'<ul>{"".join(items)}</ul><p class="prov">Figures and numbers from bench/results.json (measured '
            f'{html.escape(str(when))}); built {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())} by '
            f'slides/build.py. In a deck: → or space next, ← back, Home/End; print to PDF for a handout.</p>'
            f'</main>')
    return page("Slides — distributed training, by doing it", body, script=False)


def deck_sources(labs: list[str] | None = None) -> list[Path]:
    every = sorted(SLIDES.glob("lab*.md"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    if not labs:
        return every
    wanted = {"lab" + re.sub(r"\D", "", x) for x in labs}
    missing = wanted - {p.stem for p in every}
    if missing:
        raise BuildError(f"no deck for {', '.join(sorted(missing))}: the decks are {', '.join(p.stem for p in every)}")
    return [p for p in every if p.stem in wanted]


def build(out: Path = DEFAULT_OUT, labs: list[str] | None = None, results_path: Path = DEFAULT_RESULTS,
          log=print) -> dict[str, Deck]:
    results_path = Path(results_path)
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    if not results:
        log(f"slides: no {results_path}: every measured figure is a placeholder (run `make bench`)")
    out.mkdir(parents=True, exist_ok=True)
    built = {}
    for src in deck_sources(labs):
        t0 = time.perf_counter()
        deck, warnings = build_deck(src, results)
        (out / f"{deck.name}.html").write_text(deck.html)
        built[deck.name] = deck
        log(f"slides: {out / deck.name}.html  {deck.slides} slides, {len(deck.html) / 1e3:.0f} kB, "
            f"{time.perf_counter() - t0:.1f} s"
            + (f", {len(deck.placeholders)} not measured yet" if deck.placeholders else ""))
        for w in warnings + [f"placeholder: {p}" for p in deck.placeholders]:
            log(f"  {w}")
    titles = [(p.stem, m[1]) for p in deck_sources() if (m := TITLE.search(p.read_text()))]
    (out / "index.html").write_text(index_html(titles, results, built))
    return built


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the HTML (default: build/slides)")
    ap.add_argument("--lab", action="extend", nargs="+", metavar="LAB",
                    help="lab1 ... lab10 (repeatable; default: all)")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                    help="the measured figures (default: bench/results.json)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        built = build(args.out, args.lab, args.results)
    except BuildError as e:
        print(f"slides: {e}", file=sys.stderr)
        return 2
    print(f"slides: {len(built)} decks + index.html in {args.out} ({time.perf_counter() - t0:.1f} s); "
          f"open {args.out / 'index.html'} in a browser, no network needed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
