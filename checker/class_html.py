"""The class report as one self-contained HTML page (class.html beside class.csv): no script, no file or
font from elsewhere, so it opens from a mail attachment or an LMS upload as it does from disk.

  - a grid, one row per learner and one column per check: green passed, red a wrong value or an error, amber a
    TODO not written yet ("TODO"), purple a run that hung ("hung"), grey NOT RUN on this machine; hovering a
    cell also shows the measured value, the threshold and the message (a `title`, which every browser shows);
  - under each check's name, how the class's measured values spread: one dot per learner on a line
    from the lowest to the highest value, coloured as the cell, with the threshold as a tick;
  - a row per learner gives their score; the head gives the lab, the variant, and how many passed;
  - under the grid, "What each learner needs": for every learner with a failed check, each one's message and
    hint in plain text (no hovering), and for a hang the frames of the learner's own code it was stuck in.
"""
from __future__ import annotations

import html
import math

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px; }
p.sub { color: #555; margin: 0 0 16px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: center; }
th.check { vertical-align: bottom; font-weight: 600; min-width: 120px; }
td.learner { text-align: left; font-weight: 600; }
td.pass { background: #c8ecc9; } td.fail { background: #f6c4c1; } td.none { background: #eee; color: #888; }
td.todo, td.need-todo { background: #fde7b0; } td.hang, td.need-hang { background: #dcc8f0; }
td.need-fail { background: #f6c4c1; } td.notrun { background: #eee; color: #555; }
h2 { font-size: 17px; margin: 24px 0 4px; } h3 { font-size: 15px; margin: 14px 0 4px; }
table.needs td { text-align: left; vertical-align: top; max-width: 520px; }
table.needs td.what { font-weight: 600; min-width: 160px; max-width: 260px; }
code { font-size: 12px; } ul.frames { margin: 2px 0 0; padding-left: 18px; }
td.score { font-variant-numeric: tabular-nums; }
svg { display: block; margin: 4px auto 0; }
.legend { margin-top: 12px; color: #555; }
"""


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _fmt(v, unit: str = "") -> str:
    x = _num(v)
    if x is None:
        return "-"
    s = f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"
    return f"{s} {unit}".strip()


def _spread(points: list[tuple[float, bool]], threshold: float | None, width: int = 120, height: int = 22) -> str:
    """One dot per learner between the lowest and highest value (and the threshold), as inline SVG."""
    if not points:
        return ""
    values = [v for v, _ in points] + ([threshold] if threshold is not None else [])
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    x = lambda v: 6 + (width - 12) * (v - lo) / span  # noqa: E731
    parts = [f'<line x1="6" y1="{height // 2}" x2="{width - 6}" y2="{height // 2}" stroke="#999"/>']
    if threshold is not None:
        parts.append(f'<line x1="{x(threshold):.1f}" y1="3" x2="{x(threshold):.1f}" y2="{height - 3}" '
                     'stroke="#333" stroke-width="2"><title>threshold</title></line>')
    for v, ok in points:
        parts.append(f'<circle cx="{x(v):.1f}" cy="{height // 2}" r="4" fill="{"#2e7d32" if ok else "#c62828"}" '
                     f'fill-opacity="0.7"><title>{html.escape(_fmt(v))}</title></circle>')
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="spread of measured values">'
            + "".join(parts) + "</svg>")


def _kind(c: dict) -> str:
    """pass, fail, todo, hang or notrun: the cell's colour (report.CheckResult: status and cause)."""
    status = c.get("status") or ("pass" if c["passed"] else "fail")
    if status != "fail":
        return {"pass": "pass", "not_run": "notrun"}[status]
    return c.get("cause") if c.get("cause") in ("todo", "hang") else "fail"


def _cell(c: dict) -> tuple[str, str]:
    kind = _kind(c)
    text = {"pass": f"✓ {html.escape(_fmt(c.get('value')))}", "fail": f"✗ {html.escape(_fmt(c.get('value')))}",
            "todo": "TODO", "hang": "<b>hung</b>", "notrun": "NOT RUN"}[kind]
    return kind, text


def needs(reports: dict[str, dict]) -> str:
    """What each learner needs, in plain text: every failed check's message and hint, a hang's frames. Checks
    stopped by the same TODO are one row (a pristine starter's eight checks are its few TODOs), its message
    naming the TODO, the function to write and the `checker hint` command."""
    parts = []
    for learner, rep in reports.items():
        rows, todos = [], {}
        for c in rep.get("checks", []):
            kind = _kind(c)
            if kind == "todo":
                todos.setdefault(c.get("message", ""), []).append(c)
            if kind in ("pass", "notrun", "todo"):
                continue
            frames = c.get("frames") or []
            where = ('<ul class="frames">' + "".join(f"<li><code>{html.escape(f)}</code></li>" for f in frames)
                     + "</ul>") if frames else ""
            rows.append(f'<tr><td class="what need-{kind}">{html.escape(c["name"])}: '
                        f'{"hung" if kind == "hang" else "failed"}</td>'
                        f'<td>{html.escape(c.get("message", ""))}{where}</td>'
                        f'<td>{html.escape(c.get("hint", ""))}</td></tr>')
        for message, checks in todos.items():
            names = ", ".join(c["name"] for c in checks)
            hint = checks[0].get("hint", "") if len(checks) == 1 else (
                f"write this TODO: {'both' if len(checks) == 2 else f'all {len(checks)}'} checks run it "
                "(its hints: the `checker hint` command in the message)")
            rows.append(f'<tr><td class="what need-todo">{html.escape(names)}: TODO</td>'
                        f'<td>{html.escape(message)}</td><td>{html.escape(hint)}</td></tr>')
        if rows:
            parts.append(f'<h3>{html.escape(learner)}</h3><table class="needs"><thead><tr><th>check</th>'
                         f'<th>what happened{" (where: innermost first)" * any("<ul" in r for r in rows)}</th>'
                         f'<th>what to do</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
    return ('<h2>What each learner needs</h2>' + "".join(parts)) if parts else ""


def page(lab: str, variant: int, reports: dict[str, dict]) -> str:
    names: list[str] = []
    for rep in reports.values():
        for c in rep.get("checks", []):
            if c["name"] not in names:
                names.append(c["name"])
    by = {learner: {c["name"]: c for c in rep.get("checks", [])} for learner, rep in reports.items()}
    head = ['<th>learner</th><th>score</th><th>hints opened · the reference\'s code</th>']
    for n in names:
        cells = [by[le].get(n) for le in reports]
        points = [(_num(c["value"]), bool(c["passed"])) for c in cells if c and _num(c["value"]) is not None]
        threshold = next((_num(c["threshold"]) for c in cells if c and _num(c["threshold"]) is not None), None)
        head.append(f'<th class="check">{html.escape(n)}{_spread(points, threshold)}</th>')
    rows = []
    for learner, checks in by.items():
        cells = []
        for n in names:
            c = checks.get(n)
            if c is None:
                cells.append('<td class="none" title="not run">·</td>')
                continue
            tip = (f"{_fmt(c.get('value'), c.get('unit', ''))} "
                   f"(threshold {_fmt(c.get('threshold'), c.get('unit', ''))})"
                   f"\n{c.get('message', '')}")
            kind, text = _cell(c)
            cells.append(f'<td class="{kind}" title="{html.escape(tip)}">{text}</td>')
        score = f"{sum(bool(c['passed']) for c in checks.values())}/{len(names)}"
        notes = []  # each with its own mark, so the instructor reads which note the flag is about
        if reports[learner].get("hints_opened"):
            flag = "⚑ " if reports[learner].get("hints_flagged") else ""
            notes.append(flag + html.escape(reports[learner]["hints_opened"]))
        copied = reports[learner].get("reference_code")
        if copied:  # the reference's own code in the hand-in, token for token: for the instructor to look at
            notes.append("⚠ " + html.escape(f"holds the reference's code: {', '.join(copied)}"))
        rows.append(f'<tr><td class="learner">{html.escape(learner)}</td><td class="score">{score}</td>'
                    f'<td class="hints">{"; ".join(notes) or "none"}</td>' + "".join(cells) + "</tr>")
    passed = sum(bool(r.get("passed")) for r in reports.values())
    sandboxes = sorted({r.get("sandbox", "") for r in reports.values() if r.get("sandbox")})
    sub = (f"{len(reports)} learners, {passed} passed every check · variant {variant}"
           + "".join(f" · {html.escape(s)}" for s in sandboxes))
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(lab)}: class report'
            f'</title><style>{STYLE}</style></head><body><h1>{html.escape(lab)}: class report</h1>'
            f'<p class="sub">{sub}</p><table><thead><tr>{"".join(head)}</tr></thead><tbody>{"".join(rows)}'
            '</tbody></table><p class="legend">Green passed; red a wrong value or an error; amber TODO: not '
            'written yet; purple: the run hung (where: below); grey: NOT RUN on this machine. Hover a cell for the '
            'measured value, threshold and message. Under each check: one dot per learner from the lowest to the '
            f'highest measured value; the bar is the threshold.</p>{needs(reports)}</body></html>\n')
