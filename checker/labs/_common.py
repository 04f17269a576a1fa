"""What every lab's checks share: the Check description and turning a run's error into a result."""
from __future__ import annotations

from dataclasses import dataclass

from checker.report import CheckResult


@dataclass(frozen=True)
class Check:
    name: str
    what: str  # what the check proves, one line (checker list)
    hint: str  # the concept and where to look, shown when it fails


def error_result(check: Check, err: dict, unit: str = "") -> CheckResult:
    """A failed check from a run that raised, crashed or hung, with the evidence."""
    kind, where = err.get("type", "Error"), err.get("where") or ""
    at = f" ({where})" if where else ""
    if err.get("todo"):
        msg, details = f"not written yet: {err['todo']}{at}", ""
    elif kind == "Timeout":
        msg = f"hung: {err['message']}; killed. Where each thread was stuck is shown with -v."
        details = err.get("stacks", "")
    elif kind == "Crash":
        msg, details = f"the run died: {err['message']}", err.get("log", "")
    else:
        msg, details = f"{kind}: {err.get('message', '')}{at}", err.get("traceback", "")
    return CheckResult(check.name, False, unit=unit, message=msg, hint=check.hint, details=details)
