"""A finished graded run as the checker saw it (not as the learner's code said): exit status, timing, the results
each rank's worker sent, and the one error that explains a failure."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from checker import limits

LOG_CAP_BYTES = 20 * 2**20  # a run that prints more than this is killed (checker/harness.py)


@dataclass
class Run:
    """A finished run: what the checker saw, not what the learner's code said."""

    name: str
    returncode: int | None
    seconds: float
    timed_out: bool = False
    killed_on_cue: bool = False
    flooded: bool = False
    results: list[dict] = field(default_factory=list)  # one per rank, written by checker.worker
    log_path: Path | None = None
    stacks: str = ""
    nproc: int = 1
    forked: bool = False  # a fork of the run server, torch already imported (else a fresh process)
    clock_error: dict | None = None  # the run's clock disagreed with the checker's (checker/channel.py)
    final: bool = True  # every rank's worker reported that its task ended
    marks: dict = field(default_factory=dict)  # rank -> [(the run's clock reading, the checker's arrival stamp)]
    relay: object = None  # the checker/relay.Relay whose turns it took: the windows the parent timed

    @property
    def result(self) -> dict:
        return self.results[0] if self.results else {}

    def error(self) -> dict | None:
        """The root cause: the earliest error any rank reported (a rank that raised first makes its peers
        fail later with connection errors), or a synthesized one for a crash/timeout."""
        if self.clock_error:
            return self.clock_error
        if any(r.get("error") for r in self.results):  # the run failed: its earliest error of any part is the cause
            errors = [v for r in self.results for k, v in r.items() if (k == "error" or k.endswith("_error")) and v]
            return limits.explain(min(errors, key=lambda e: e.get("t", float("inf"))))
        if self.results and self.final and len(self.results) >= self.nproc:
            return None  # every rank's result is in: what the process did after it (a leftover thread) is not the run's
        if self.timed_out:
            return {"type": "Timeout", "message": f"no result within {self.seconds:.0f} s", "stacks": self.stacks}
        if self.flooded:
            return {"type": "Flood", "message": f"printed more than {LOG_CAP_BYTES >> 20} MB; killed. Print less "
                                                "(rank 0, every N steps) or log to a file", "log": self.log_tail()}
        if not self.results:
            tail = self.log_tail()
            return {"type": "Crash", "message": f"exit status {self.returncode}, no result written{self._fatal()}",
                    "log": tail}
        if len(self.results) < self.nproc and not self.killed_on_cue:
            return {"type": "Crash", "message": f"exit status {self.returncode}: only {len(self.results)} of "
                                                f"{self.nproc} ranks wrote a result", "log": self.log_tail()}
        return None

    def _fatal(self) -> str:
        """Where a fatal signal struck (faulthandler's report in the log: the innermost frame of learner code)."""
        text = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
        if "Fatal Python error" not in text:
            return ""
        what, *lines = text[text.rindex("Fatal Python error: ") + 20:].splitlines()
        frames = [ln.strip() for ln in lines if ln.strip().startswith("File ") and f"{os.sep}labs{os.sep}" in
                  ln.replace(f"checker{os.sep}labs", "")]  # the learner's (or the core's) code, not the checker's
        return f" ({what}{', at ' + frames[0] if frames else ''})"

    def log_tail(self, n: int = 15) -> str:
        if self.log_path and self.log_path.exists():
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""
