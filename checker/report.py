"""Check results, the terminal report card and the --json report (schema in COURSE.md, a contract)."""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table


@dataclass
class CheckResult:
    name: str
    passed: bool
    value: float | None = None
    threshold: float | None = None
    unit: str = ""
    message: str = ""
    hint: str = ""
    details: str = field(default="", repr=False)  # long evidence (stacks, tracebacks): terminal only on -v

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("details")
        for k in ("value", "threshold"):  # JSON has no NaN/inf
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = None
        return d


@dataclass
class LabReport:
    lab: str
    target: str
    device: str
    world_size: int
    seconds: float
    checks: list[CheckResult]
    info: list[tuple[str, str]] = field(default_factory=list)  # measured figures, not graded

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def to_json(self) -> dict:
        return {"lab": self.lab, "target": self.target, "device": self.device, "world_size": self.world_size,
                "passed": self.passed, "seconds": round(self.seconds, 2),
                "checks": [c.to_json() for c in self.checks],
                "info": [{"name": k, "value": v} for k, v in self.info]}


def _fmt(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "nan"
        s = f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"
    else:
        s = f"{x:,}" if isinstance(x, int) else str(x)
    return f"{s} {unit}".strip()


def render(report: LabReport, console: Console, verbose: bool = False) -> None:
    title = (f"checker grade {report.lab} — {report.target}/ on {report.device}, world size "
             f"{report.world_size}, {report.seconds:.1f} s")
    table = Table(title=title, show_lines=True, title_justify="left")
    for col in ("check", "result", "measured", "threshold", "what happened / what to do"):
        table.add_column(col, overflow="fold")
    for c in report.checks:
        mark = "[green]PASS[/]" if c.passed else "[red]FAIL[/]"
        text = c.message if c.passed else f"{c.message}\n[yellow]hint:[/] {c.hint}"
        if verbose and c.details:
            text += f"\n[dim]{c.details}[/]"
        table.add_row(c.name, mark, _fmt(c.value, c.unit), _fmt(c.threshold, c.unit), text)
    console.print(table)
    for k, v in report.info:
        console.print(f"  [dim]info[/] {k}: {v}")
    n_ok = sum(c.passed for c in report.checks)
    colour = "green" if report.passed else "red"
    console.print(f"[{colour}]{report.lab}: {n_ok}/{len(report.checks)} checks passed[/]")


def write_json(reports: list[LabReport], path: str) -> None:
    """One lab: the contract's object. Several (--all): {"passed": ..., "labs": [objects]}."""
    data = reports[0].to_json() if len(reports) == 1 else {
        "passed": all(r.passed for r in reports), "labs": [r.to_json() for r in reports]}
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, p)
