"""Lab 4's forensics checks, checker side: the learner's analysers against the answer key of runs the checker made.

desync_found: the course's faulty job (solutions/lab4_debugging/desync.py) ran once per kind of fault, with the
flight recorder on, at the grade's variant (the faulty rank and step hidden). The rank that injected the fault
reported where the ranks first disagree, as the recorder numbers it (its next collective_seq_id when it went
wrong): that is the key. The learner's find_desync sees only the dump files, never the key or the job's log.
"""
from __future__ import annotations

from checker.labs._common import Check, error_result, first_error
from checker.report import CheckResult

FIELDS = ("rank", "seq", "kind")


def truth(runs, kind: str) -> tuple[dict | None, dict | None]:
    """(the answer key of one faulty run, or its error): the key comes from the rank that injected the fault."""
    err = first_error(runs, f"desync_{kind}")
    if err:
        return None, err
    keys = [r["truth"] for r in runs[f"desync_{kind}"].results if r.get("truth")]
    if len(keys) != 1:
        return None, {"type": "Error", "message": f"the faulty {kind} job reported {len(keys)} faults, not one"}
    return keys[0], None


def desync_found(c: Check, runs, kinds) -> CheckResult:
    """Every case right in every field; the message names the case and the fields that are wrong, not the key."""
    keys = {}
    for kind in kinds:
        key, err = truth(runs, kind)
        if err:  # the checker's own faulty job failed to produce its evidence: not the learner's failure to hide
            return CheckResult(c.name, False, hint=c.hint,
                               message=f"the checker's faulty job ({kind}) did not produce its dumps: "
                                       f"{err.get('type')}: {err.get('message', '')[:200]}")
        keys[kind] = key
    err = first_error(runs, "desync_analyse")
    if err:
        return error_result(c, err)
    answers = runs["desync_analyse"].result["answers"]
    wrong = []
    for kind, key in keys.items():
        got = answers.get(kind)
        if got is None:
            wrong.append(f"{kind}: not analysed")
            continue
        if got["error"]:
            return error_result(c, got["error"])
        answer = got["answer"]
        bad = [f for f in FIELDS if answer.get(f) != key[f]]
        if bad:
            said = ", ".join(f"{f}={answer.get(f)!r}" for f in FIELDS)
            wrong.append(f"{kind} case: you said {said}; wrong: {', '.join(bad)}")
    right = len(keys) - len(wrong)
    if wrong:
        return CheckResult(c.name, False, value=right, threshold=len(keys), unit="cases right", hint=c.hint,
                           message="; ".join(wrong))
    return CheckResult(c.name, True, value=right, threshold=len(keys), unit="cases right", hint=c.hint,
                       message="rank, sequence number and kind right for every case: " + ", ".join(
                           f"{k} r{keys[k]['rank']}@{keys[k]['seq']} {keys[k]['kind']}" for k in keys))
