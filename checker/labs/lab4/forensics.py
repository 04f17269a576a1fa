"""Lab 4's forensics checks, each one declaration on the evaluator that decides it: the learner's analysers against the
answer key of runs the checker made. checks.py puts them after the incidents' checks.

desync_found: the course's faulty job (solutions/lab4_debugging/desync.py) ran once per kind of fault, with the
flight recorder on, at the grade's variant (the faulty rank and step hidden). The rank that injected the fault
reported where the ranks first disagree, as the recorder numbers it (its next collective_seq_id when it went
wrong): that is the key. The learner's find_desync sees only the dump files, never the key or the job's log.
Two features of the dumps catch analysers that work on easy dumps only. Every case has a send from rank 0 to rank 1
after each step's collectives, in the dumps as NCCL records it (is_p2p, the collective_seq_id of the collective
before it): kept in, a send stands for the collective before it on ranks 0 and 1 only, and the previous step's send
comes before every fault (a fault's step is 2 or later). The behind case's ring holds desync.WRAPPED = 8 entries and
has wrapped: an entry's position in a dump (at most 8) is never the fault's sequence number (at least 10).

slow_rank_found: the course's link probe (linkprobe.py) ran with one rank's link slowed to a rate the checker chose
(hidden: rank and rate); the learner's slow_rank sees only the ranks' profiler traces. The rank must be right and
the rate within RATE_BAND of the configured one: the emulated link carries a transfer in nbytes / rate plus gloo's
own ~1 ms, so a right reading lands within a few percent; reading bits for bytes is 8x off, averaging in the fast
pairs is several times off. slow_rank_found_netns: the same probe over a real link (root): one namespace per rank
on a bridge, the slow rank's cable tbf-shaped (slowlink.Star); measured 0.0247 GB/s for a 200 Mbit/s (0.025) cable.

memory_leak_found: the course's leaking loop (solutions/lab4_debugging/memleak.py) ran once per kind at the grade's
variant (batch, sequence and steps hidden), its memory history recorded (labs/instruments/memory_history.py: torch's
recorder on a GPU, the same format emulated on the CPU). The key: the line of memleak.py that allocates what each
step keeps, and the bytes one step keeps, measured apart from the recording (memleak.saved_bytes). The line must be
exact, the bytes within BYTES_BAND, and the clean run None. The recorder counts every storage exactly, so a right
reading lands on the key (measured: equal at variants 0-2); the wrong readings are off by whole factors: the total
over all steps (5-8x), one tensor of a step's graph instead of all it saved (losses: ~1/10).
"""
from __future__ import annotations

from pathlib import Path

from checker.labs._common import Check, declare, error_result, first_error
from checker.labs.lab4 import WHERE
from checker.report import CheckResult

CHECKS: list[Check] = []
check = declare(CHECKS)
# Every check runs the course's own jobs (solutions/lab4_debugging): none runs in a class handout. Each evaluator
# reads the runs and what the grade found beside them (checks.Facts).
COURSE = ("reference",)

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


@check("desync_found", "forensics.find_desync on the flight-recorder dumps of 5 faulty 3-rank jobs the checker ran "
       "(hidden rank and step; point-to-point entries in every dump, one case's ring wrapped): the rank that "
       "diverged, the collective sequence number, the kind of mismatch",
       f"{WHERE}/forensics.py find_desync(): lay the ranks' entries side by side by collective_seq_id; at the first "
       "disagreement, which rank is the odd one out (not the first to time out, not the one with fewest entries)? "
       "Try it on `python -m labs.lab4_debugging.desync KIND`'s dumps (checker hint lab4 forensics.find_desync)",
       needs=COURSE)
def desync_found(c: Check, runs, facts) -> CheckResult:
    """Every case right in every field; the message names the case and the fields that are wrong, not the key."""
    keys = {}
    for kind in facts.desync_kinds:
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


@check("slow_rank_found", "forensics.slow_rank on the profiler traces of linkprobe.py's 3 ranks, one rank's link "
       "slowed (hidden rank and rate): that rank, and its link's rate within a band",
       f"{WHERE}/forensics.py slow_rank(): a transfer is as slow as the slower of its two ends; which rank is in every "
       "slow pair, and how many bytes per second did those transfers move (GB/s: 10^9 bytes, not bits)? Try it on "
       "`python -m labs.lab4_debugging.linkprobe`'s traces (checker hint lab4 forensics.slow_rank)",
       needs=COURSE)
def slow_rank_found(c: Check, runs, facts) -> CheckResult:
    """The rank the checker slowed, and the rate it set (facts.slow_link: rank, GB/s)."""
    return _slow_rank(c, runs, *facts.slow_link)


def _slow_rank(c: Check, runs, slow: int, rate_gbps: float, probe: str = "linkprobe",
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
                                                               "link the checker slowed (a rank of the slowest pair "
                                                               "is not enough: is your rank in every slow pair, and "
                                                               "does it have no fast one?)")
    if not isinstance(gbps, (int, float)) or gbps <= 0:
        return CheckResult(c.name, False, hint=c.hint, message=f"gbps must be a positive number of GB/s, got {gbps!r}")
    ratio = gbps / rate_gbps
    ok = abs(ratio - 1) <= RATE_BAND
    return CheckResult(c.name, ok, value=round(ratio, 3), threshold=RATE_BAND, unit="measured / configured rate",
                       hint=c.hint, message=(f"rank {rank}, {gbps:.4f} GB/s" + (
                           f" (the link was set to {rate_gbps:g} GB/s)" if ok else
                           f": {ratio:.2f}x the rate the checker set; within {1 - RATE_BAND:.2f}..{1 + RATE_BAND:.2f}"
                           " passes. Bytes or bits? Which transfers crossed the slow link?")))


BYTES_BAND = 0.10  # |bytes_per_step / key - 1| at most


@check("memory_leak_found", "forensics.find_memory_leak on memory snapshots of memleak.py's training loop, which "
       "the checker recorded (hidden batch, sequence, steps): the leaking line of 3 leaks exactly, its bytes per step "
       "within a band; None for the clean run",
       f"{WHERE}/forensics.py find_memory_leak(): which allocations are never freed, which line of the script made "
       "each (not torch's frame), and does that line leave bytes alive on every pass or only once? Try it on `python "
       "-m labs.lab4_debugging.memleak logits`'s snapshot, and open it in https://pytorch.org/memory_viz "
       "(checker hint lab4 forensics.find_memory_leak)",
       needs=COURSE)
def memory_leak_found(c: Check, runs, facts) -> CheckResult:
    """Every leak's line exact and bytes within the band, and no leak named in the clean run. The message says what
    the learner named and why it is not the leak, never the key's line."""
    err = first_error(runs, "memleak")
    if err:
        return CheckResult(c.name, False, hint=c.hint, message="the checker's leaking loop did not produce its "
                           f"snapshots: {err.get('type')}: {err.get('message', '')[:200]}")
    keys = runs["memleak"].result["keys"]
    err = first_error(runs, "forensics")
    if err:
        return error_result(c, err)
    answers = runs["forensics"].result.get("memory") or {}
    wrong = []
    for kind, key in keys.items():
        got = answers.get(kind)
        if got is None:
            wrong.append(f"{kind}: not analysed")
            continue
        if got["error"]:
            return error_result(c, got["error"])
        wrong += _leak_wrong(kind, key, got["answer"], runs["forensics"].result.get("snapshots", {}).get(kind))
    right = len(keys) - len(wrong)
    if wrong:
        return CheckResult(c.name, False, value=right, threshold=len(keys), unit="runs right", hint=c.hint,
                           message="; ".join(wrong))
    return CheckResult(c.name, True, value=right, threshold=len(keys), unit="runs right", hint=c.hint,
                       message="every leak's line and bytes per step, and the clean run clean: " + ", ".join(
                           f"{k} line {v['line']} {v['bytes_per_step']:,} B/step" if v["line"] else f"{k} none"
                           for k, v in keys.items()))


def _leak_wrong(kind: str, key: dict, answer, snapshot: str | None) -> list[str]:
    """What is wrong with one answer ([] if nothing), with what the snapshot shows of the line the learner named."""
    name = Path(key["file"]).name
    if answer is not None and not isinstance(answer, dict):
        return [f"{kind} run: return a dict or None, not {answer!r}"]
    said = f"{Path(str(answer.get('file'))).name}:{answer.get('line')}" if answer else ""
    if key["line"] is None:  # the clean run
        if answer is None:
            return []
        return [f"clean run: you named {said}, but nothing in this run grows: {_named(snapshot, key, answer)}"]
    if answer is None:
        return [f"{kind} run: you returned None; what this run keeps grows by {key['bytes_per_step']:,} bytes every "
                "step"]
    file, line, nbytes = answer.get("file"), answer.get("line"), answer.get("bytes_per_step")
    if Path(str(file)).name != name:
        return [f"{kind} run: you named {said}, not a line of {name} (the script): a frame of what it calls"]
    if line != key["line"]:
        return [f"{kind} run: you named {said}: {_named(snapshot, key, answer)}; what piles up grows by "
                f"{key['bytes_per_step']:,} bytes per step"]
    if not isinstance(nbytes, (int, float)) or nbytes <= 0:
        return [f"{kind} run: bytes_per_step must be a positive number of bytes, got {nbytes!r}"]
    ratio = nbytes / key["bytes_per_step"]
    if abs(ratio - 1) > BYTES_BAND:
        return [f"{kind} run: line {line} is right, but {nbytes:,} bytes per step is {ratio:.2f}x what one step "
                f"keeps ({key['steps']} steps ran): the total, or one tensor of several?"]
    return []


def _named(snapshot: str | None, key: dict, answer: dict) -> str:
    """What the snapshot shows of the line the learner named: its allocations, and how many outlive the run. (A
    snapshot is plain pickled dicts and lists: reading it needs no torch.)"""
    import pickle

    if not snapshot or not Path(snapshot).exists():
        return "not the line that allocates what piles up"
    with open(snapshot, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    mine, live = [], {}
    for e in trace:
        if e["action"] == "alloc":
            at = next((f["line"] for f in e["frames"] if f["filename"] == key["file"]), None)
            live[e["addr"]] = len(mine) if at == answer.get("line") else None
            if at == answer.get("line"):
                mine.append(e["size"])
        elif e["action"] == "free_completed" and live.get(e["addr"]) is not None:
            mine[live.pop(e["addr"])] = 0
    if not mine:
        return "nothing was allocated there in this run (frames[0] is the innermost call, inside torch or the model)"
    kept = [b for b in mine if b]
    if not kept:
        return f"its {len(mine)} allocations were all freed within their step"
    return (f"{len(kept)} of its {len(mine)} allocations ({sum(kept):,} bytes) are alive at the end, but they were "
            "allocated once (the optimizer's state) or by the step in progress, not again every step")


@check("slow_rank_found_netns", "forensics.slow_rank on the link probe over a real link: one network namespace per "
       "rank on a bridge, one rank's cable tbf-shaped (hidden rank and rate): that rank, and the rate within a band",
       "The same slow_rank as slow_rank_found, on traces of a real shaped link: a kernel-buffered send returns early; "
       "which spans cover the whole transfer? (checker hint lab4 forensics.slow_rank)",
       needs=("root", *COURSE))
def slow_rank_found_netns(c: Check, runs, facts) -> CheckResult:
    """slow_rank_found's verdict on the real link's traces (facts.netns_link: rank, Mbit/s), made by a command of its
    own run as root, not a worker run."""
    rank, mbit = facts.netns_link
    return _slow_rank(c, runs, rank, mbit / 8e3, "linkprobe_netns", "slow_rank_netns", command=True)
