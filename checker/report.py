"""Check results, the terminal report card and the --json report (schema: checker/README.md, a contract)."""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from checker import seams

PASS, FAIL, NOT_RUN = "pass", "fail", "not_run"


@dataclass
class CheckResult:
    """One check's outcome. not_run: this machine cannot run the check (no Slurm, no root, no GPU); the
    message says why and the hint how to run it. Such a check is neither passed nor the learner's failure."""
    name: str
    passed: bool
    value: float | None = None
    threshold: float | None = None
    unit: str = ""
    message: str = ""
    hint: str = ""
    details: str = field(default="", repr=False)  # long evidence (stacks, tracebacks): terminal only on -v
    not_run: bool = False
    # why a run-based check failed, when a run did not finish (checker/labs/_common.py: error_result): "todo" (a
    # TODO not written yet), "hang" (the watchdog or the budget ended it), "crash", "error" (learner code raised);
    # "" for a measured failure (a wrong value) and for every pass. A class report shows a hang and a TODO apart.
    cause: str = ""

    def __post_init__(self):
        if self.not_run:
            self.passed = False  # never counted as passed

    @property
    def status(self) -> str:
        return NOT_RUN if self.not_run else PASS if self.passed else FAIL

    def to_json(self, folder: str = "") -> dict:
        """The contract's check object; `folder` (the graded lab's, e.g. lab2_ddp) adds `frames`: where in the
        learner's own code a failed run was (a hang's stacks, a traceback), innermost first."""
        d = asdict(self)
        details = d.pop("details")
        d["frames"] = learner_frames(details, folder) if folder and not self.passed else []
        d["status"] = self.status
        d.pop("not_run")
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
    ranks: str = ""  # where a lab's runs take different numbers of ranks (labs 9, 10): "1-4 ranks per run"

    @property
    def passed(self) -> bool:
        """A grade: every check ran and passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def not_run(self) -> list[CheckResult]:
        return [c for c in self.checks if c.not_run]

    @property
    def status(self) -> str:
        """fail: a check that ran failed; not_run: none failed but some could not run here; else pass."""
        return FAIL if self.failed or not self.checks else NOT_RUN if self.not_run else PASS

    @property
    def complete(self) -> bool:
        return len(self.checks) >= self.total_checks

    def to_json(self) -> dict:
        return {"lab": self.lab, "target": self.target, "device": self.device, "world_size": self.world_size,
                "passed": self.passed, "status": self.status, "complete": self.complete, "variant": self.variant,
                "seconds": round(self.seconds, 2),
                "checks": [c.to_json(_folder(self.lab)) for c in self.checks],
                "info": [{"name": k, "value": v} for k, v in self.info], "sandbox": self.sandbox}


def _folder(lab: str) -> str:
    return seams.SEAMS[lab].folder if lab in seams.SEAMS else ""


# A frame as Python's traceback writes it ('File "p", line 12, in f', outermost first) or faulthandler's stack
# dump of a hung run ('File "p", line 12 in f', innermost first, one block per thread).
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?P<comma>,?) in (?P<fn>\S+)', re.M)
MAX_FRAMES = 6  # a hang's story: the stuck line and the few calls of the learner's own code above it


def learner_frames(text: str, folder: str) -> list[str]:
    """The frames in `text` of the graded lab's own code (labs/<folder>/ or solutions/<folder>/, wherever the
    tree lies: a batch grades a private copy), as 'labs/lab2_ddp/naive.py:40 in sync_grads', innermost first,
    each once. Frames of the course's core, torch and the checker are left out: they are the same for everyone."""
    out: list[str] = []
    for block in re.split(r"\n(?=\S)", text or ""):  # a header line ("Thread 0x...", "Traceback") opens a block
        frames = []
        for m in FRAME.finditer(block):
            parts = m["path"].replace("\\", "/").split("/")
            at = [i for i in range(len(parts) - 1) if parts[i] in ("labs", "solutions") and parts[i + 1] == folder]
            if at:
                frames.append((f"{'/'.join(parts[at[-1]:])}:{m['line']} in {m['fn']}", bool(m["comma"])))
        if frames and frames[0][1]:  # a Python traceback: outermost first
            frames.reverse()
        out += [f for f, _ in frames]
    return list(dict.fromkeys(out))[:MAX_FRAMES]


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
    ranks = report.ranks or f"world size {report.world_size}"
    title = f"checker grade {report.lab} — {report.target}/ on {report.device}, {ranks}, {report.seconds:.1f} s"
    table = Table(title=title, show_lines=True, title_justify="left")
    for col in ("check", "result", "measured", "threshold", "what happened / what to do"):
        table.add_column(col, overflow="fold")
    for c in report.checks:  # messages and stacks quote learner code and logs: never read them as markup
        mark = {PASS: "[green]PASS[/]", FAIL: "[red]FAIL[/]", NOT_RUN: "[yellow]NOT RUN[/]"}[c.status]
        text = (escape(c.message) if c.passed else
                f"{escape(c.message)}\n[yellow]{'to run it' if c.not_run else 'hint'}:[/] {escape(c.hint)}")
        if verbose and c.details:
            text += f"\n[dim]{escape(c.details)}[/]"
        table.add_row(c.name, mark, escape(_fmt(c.value, c.unit)), escape(_fmt(c.threshold, c.unit)), text)
    console.print(table)
    for k, v in report.info:
        console.print(f"  [dim]info[/] {escape(k)}: {escape(str(v))}")
    n_ok, n_ran = sum(c.passed for c in report.checks), len(report.checks) - len(report.not_run)
    colour = {PASS: "green", FAIL: "red", NOT_RUN: "yellow"}[report.status]
    partial = "" if report.complete else (f" — partial run: only {len(report.checks)} of {report.total_checks} "
                                          "checks ran (--only); this is not a grade")
    not_run = (f"; {len(report.not_run)} NOT RUN on this machine (not failures; each row says how to run it): "
               "not a grade" if report.not_run else "")
    console.print(f"[{colour}]{report.lab}: {n_ok}/{n_ran} checks passed{not_run}{partial}[/]")
    if report.sandbox:
        console.print(f"[dim]{escape(report.sandbox)}[/]")
    if report.variant == 0:
        console.print("[dim]Graded runs use hidden variants (by lab: other seeds, data order, kill steps, world "
                      "sizes): a fix must be general, not tuned to these numbers.[/]")


def render_not_run(reports: list[LabReport], console: Console) -> None:
    """After several labs: the checks this machine could not run, in one list, so they are not missed."""
    groups: dict[tuple[str, str, str], list[str]] = {}  # (lab, why, how) -> checks: one line per reason
    for r in reports:
        for c in r.not_run:
            groups.setdefault((r.lab, c.message, c.hint), []).append(c.name)
    if groups:
        n = sum(map(len, groups.values()))
        console.print(f"[yellow]NOT RUN on this machine ({n} checks; not failures):[/]")
        for (lab, why, how), names in groups.items():
            console.print(f"  [yellow]{lab} {', '.join(names)}[/]: {escape(why)}. To run them: {escape(how)}")


def closing_line(reports: list[LabReport]) -> str:
    """After several labs (`--all`, `make demo`): the one line that says how it went, last on the screen."""
    checks = [c for r in reports for c in r.checks]
    n = {s: sum(c.status == s for c in checks) for s in (PASS, NOT_RUN, FAIL)}
    failed = [r.lab for r in reports if r.failed or not r.checks]
    verdict = (f"FAILED in {', '.join(failed)}" if failed else
               "nothing ran" if not n[PASS] else
               "every check that ran passed" + ("; the NOT RUN ones are listed above" if n[NOT_RUN] else ""))
    return (f"{len(reports)} lab{'s' * (len(reports) != 1)}, {n[PASS]} check{'s' * (n[PASS] != 1)} passed, "
            f"{n[NOT_RUN]} NOT RUN, {n[FAIL]} failed — {verdict}")


def status_of(reports: list[LabReport]) -> str:
    """Several labs as one: fail if any failed; not_run if none failed but some check could not run."""
    statuses = {r.status for r in reports}
    return FAIL if FAIL in statuses or not reports else NOT_RUN if NOT_RUN in statuses else PASS


def write_json(reports: list[LabReport], path: str, every_lab: bool = False) -> None:
    """One lab: the contract's object. --all: {"passed": ..., "status": ..., "labs": [objects]}."""
    data = reports[0].to_json() if len(reports) == 1 and not every_lab else {
        "passed": all(r.passed for r in reports), "status": status_of(reports), "labs": [r.to_json() for r in reports]}
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, p)
