"""The checker's `--json` report as a table: HTML in a notebook, fixed-width text anywhere else.

    proc = subprocess.run([sys.executable, "-m", "checker", "grade", "lab1", "--json", path], ...)
    display(grade_table(path, proc))

The report's format is the checker's contract (checker/README.md): {"lab", "target", "device",
"world_size", "passed", "seconds", "checks": [{"name", "passed", "value", "threshold", "unit",
"message", "hint"}]}; `checker grade --all` writes {"passed", "labs": [reports]}. When the checker
wrote no report (bad usage, code that does not import: exit status 2), the table says so and shows
what the checker printed instead.
"""
from __future__ import annotations

import html
import json
import math
import subprocess
from pathlib import Path


def _fmt(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        s = str(x)
    elif isinstance(x, float):
        s = "nan" if not math.isfinite(x) else f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"
    elif isinstance(x, int):
        s = f"{x:,}"
    else:
        s = str(x)
    return f"{s} {unit}".strip()


class GradeTable:
    """One or more lab reports; `_repr_html_` for JupyterLab, `str()` for text (nbval, a terminal)."""

    def __init__(self, report: dict | None, output: str = "", returncode: int | None = None):
        self.report, self.output, self.returncode = report, output, returncode
        self.labs = [] if report is None else report.get("labs", [report])

    @property
    def passed(self) -> bool:
        return bool(self.labs) and all(lab.get("passed") for lab in self.labs)

    @staticmethod
    def _title(lab: dict) -> str:
        checks = lab.get("checks", [])
        n_ok = sum(bool(c.get("passed")) for c in checks)
        partial = "" if lab.get("complete", True) else " (partial: --only; not a grade)"
        return (f"checker grade {lab.get('lab')} - {lab.get('target')}/ on {lab.get('device')}, world size "
                f"{lab.get('world_size')}, {_fmt(lab.get('seconds'))} s: {n_ok}/{len(checks)} checks passed{partial}")

    @staticmethod
    def _result(c: dict) -> str:
        """PASS, FAIL, or NOT RUN: a check this machine could not run (no Slurm, say), which is neither."""
        return "NOT RUN" if c.get("status") == "not_run" else "PASS" if c.get("passed") else "FAIL"

    @classmethod
    def _row(cls, c: dict) -> list[str]:
        text = c.get("message") or ""
        if not c.get("passed") and c.get("hint"):
            text = f"{text}  {'to run it' if cls._result(c) == 'NOT RUN' else 'hint'}: {c['hint']}".strip()
        return [str(c.get("name", "?")), cls._result(c),
                _fmt(c.get("value"), c.get("unit", "")), _fmt(c.get("threshold"), c.get("unit", "")), text]

    def _missing(self) -> str:
        return (f"the checker wrote no report (exit status {self.returncode}); it printed:\n"
                + (self.output.strip()[-3000:] or "(nothing)"))

    def __str__(self) -> str:
        if not self.labs:
            return self._missing()
        head = ["check", "result", "measured", "threshold", "what happened / what to do"]
        out = []
        for lab in self.labs:
            rows = [head] + [self._row(c) for c in lab.get("checks", [])]
            widths = [max(len(r[i]) for r in rows) for i in range(4)]
            out.append(self._title(lab))
            for r in rows:
                out.append("  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + "  " + r[4])
            out += [f"  info {i.get('name')}: {i.get('value')}" for i in lab.get("info", [])]
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.labs:
            return f"<pre>{html.escape(self._missing())}</pre>"
        parts = []
        for lab in self.labs:
            body = []
            for c in lab.get("checks", []):
                name, result, value, threshold, _ = map(html.escape, self._row(c))
                colour = {"PASS": "#2e7d32", "NOT RUN": "#b26a00"}.get(self._result(c), "#c62828")
                text = html.escape(c.get("message") or "")
                if not c.get("passed") and c.get("hint"):
                    label = "to run it" if self._result(c) == "NOT RUN" else "hint"
                    text += f"<br><b style='color:#b26a00'>{label}:</b> {html.escape(c['hint'])}"
                body.append(f"<tr><td><code>{name}</code></td><td style='color:{colour};font-weight:bold'>{result}"
                            f"</td><td>{value}</td><td>{threshold}</td><td style='text-align:left'>{text}</td></tr>")
            parts.append(
                f"<table class='course-grade'><caption style='text-align:left'><b>{html.escape(self._title(lab))}"
                "</b></caption><thead><tr><th>check</th><th>result</th><th>measured</th><th>threshold</th>"
                "<th style='text-align:left'>what happened / what to do</th></tr></thead><tbody>"
                + "".join(body) + "</tbody></table>"
                + "".join(f"<div style='font-size:12px;color:#555'>info {html.escape(str(i.get('name')))}: "
                          f"{html.escape(str(i.get('value')))}</div>" for i in lab.get("info", [])))
        return "".join(parts)


def grade_table(path, proc: subprocess.CompletedProcess | None = None) -> GradeTable:
    """The report at `path` as a table. proc: the checker's CompletedProcess (its exit status, and its
    output shown in place of the table when it wrote no report). A dict is accepted for `path` too."""
    output = "" if proc is None else f"{proc.stdout or ''}{proc.stderr or ''}"
    rc = None if proc is None else proc.returncode
    if isinstance(path, dict):
        return GradeTable(path, output, rc)
    p = Path(path)
    try:
        report = json.loads(p.read_text())
    except (OSError, ValueError):
        report = None
    return GradeTable(report, output, rc)
