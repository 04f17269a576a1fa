"""Check results, the terminal report card and the --json report (schema: checker/README.md, a contract)."""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
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
    total_checks: int = 0  # how many checks the lab has; fewer ran with --only
    variant: int = 0
    sandbox: str = ""  # how the runs were isolated (checker/cli.py: _sandbox_line), on every report

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def complete(self) -> bool:
        return len(self.checks) >= self.total_checks

    def to_json(self) -> dict:
        return {"lab": self.lab, "target": self.target, "device": self.device, "world_size": self.world_size,
                "passed": self.passed, "complete": self.complete, "variant": self.variant,
                "seconds": round(self.seconds, 2),
                "checks": [c.to_json() for c in self.checks],
                "info": [{"name": k, "value": v} for k, v in self.info], "sandbox": self.sandbox}


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
    for c in report.checks:  # messages and stacks quote learner code and logs: never read them as markup
        mark = "[green]PASS[/]" if c.passed else "[red]FAIL[/]"
        text = escape(c.message) if c.passed else f"{escape(c.message)}\n[yellow]hint:[/] {escape(c.hint)}"
        if verbose and c.details:
            text += f"\n[dim]{escape(c.details)}[/]"
        table.add_row(c.name, mark, escape(_fmt(c.value, c.unit)), escape(_fmt(c.threshold, c.unit)), text)
    console.print(table)
    for k, v in report.info:
        console.print(f"  [dim]info[/] {escape(k)}: {escape(str(v))}")
    n_ok = sum(c.passed for c in report.checks)
    colour = "green" if report.passed else "red"
    partial = "" if report.complete else (f" — partial run: only {len(report.checks)} of {report.total_checks} "
                                          "checks ran (--only); this is not a grade")
    console.print(f"[{colour}]{report.lab}: {n_ok}/{len(report.checks)} checks passed{partial}[/]")
    if report.sandbox:
        console.print(f"[dim]{escape(report.sandbox)}[/]")
    if report.variant == 0:
        console.print("[dim]Graded runs use hidden variants (by lab: other seeds, data order, kill steps, world "
                      "sizes): a fix must be general, not tuned to these numbers.[/]")


def write_json(reports: list[LabReport], path: str) -> None:
    """One lab: the contract's object. Several (--all): {"passed": ..., "labs": [objects]}."""
    data = reports[0].to_json() if len(reports) == 1 else {
        "passed": all(r.passed for r in reports), "labs": [r.to_json() for r in reports]}
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, p)
