"""Lab 4's forensics checks, checker side: the learner's analysers against the answer key of runs the checker made.

desync_found: the course's faulty job (solutions/lab4_debugging/desync.py) ran once per kind of fault, with the
flight recorder on, at the grade's variant (the faulty rank and step hidden). The rank that injected the fault
reported where the ranks first disagree, as the recorder numbers it (its next collective_seq_id when it went
wrong): that is the key. The learner's find_desync sees only the dump files, never the key or the job's log.

slow_rank_found: the course's link probe (linkprobe.py) ran with one rank's link slowed to a rate the checker chose
(hidden: rank and rate); the learner's slow_rank sees only the ranks' profiler traces. The rank must be right and
the rate within RATE_BAND of the configured one: the emulated link carries a transfer in nbytes / rate plus gloo's
own ~1 ms, so a right reading lands within a few percent; reading bits for bytes is 8x off, averaging in the fast
pairs is several times off. slow_rank_found_netns: the same probe over a real link (root): one namespace per rank
on a bridge, the slow rank's cable tbf-shaped (slowlink.Star); measured 0.0247 GB/s for a 200 Mbit/s (0.025) cable.
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
    err = first_error(runs, "forensics")
    if err:
        return error_result(c, err)
    answers = runs["forensics"].result["answers"]
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


RATE_BAND = 0.25  # |measured / configured - 1| at most


def slow_rank_found(c: Check, runs, slow: int, rate_gbps: float, probe: str = "linkprobe",
                    key: str = "slow_rank", command: bool = False) -> CheckResult:
    """The answer of the learner's slow_rank (`key` in the forensics run's result) on the traces of `probe` (a
    worker run, or a command: the real link's, whose exit status says whether it made its traces)."""
    run = runs.get(probe)
    if command and run is not None:
        err = None if run.returncode == 0 and not run.timed_out else {
            "type": "Error", "message": f"exit status {run.returncode}: {run.log_tail(5)}"}
    else:
        err = first_error(runs, probe)
    if err:
        return CheckResult(c.name, False, hint=c.hint, message=f"the checker's link probe did not produce its traces: "
                                                               f"{err.get('type')}: {err.get('message', '')[:200]}")
    err = first_error(runs, "forensics")
    if err:
        return error_result(c, err)
    got = runs["forensics"].result.get(key) or {"answer": {}, "error": None}
    if got["error"]:
        return error_result(c, got["error"])
    answer = got["answer"]
    rank, gbps = answer.get("rank"), answer.get("gbps")
    if rank != slow:
        return CheckResult(c.name, False, hint=c.hint, message=f"you named rank {rank!r}; that is not the rank whose "
                                                               "link the checker slowed")
    if not isinstance(gbps, (int, float)) or gbps <= 0:
        return CheckResult(c.name, False, hint=c.hint, message=f"gbps must be a positive number of GB/s, got {gbps!r}")
    ratio = gbps / rate_gbps
    ok = abs(ratio - 1) <= RATE_BAND
    return CheckResult(c.name, ok, value=round(ratio, 3), threshold=RATE_BAND, unit="measured / configured rate",
                       hint=c.hint, message=(f"rank {rank}, {gbps:.4f} GB/s" + (
                           f" (the link was set to {rate_gbps:g} GB/s)" if ok else
                           f": {ratio:.2f}x the rate the checker set; within {1 - RATE_BAND:.2f}..{1 + RATE_BAND:.2f}"
                           " passes. Bytes or bits? Which transfers crossed the slow link?")))
