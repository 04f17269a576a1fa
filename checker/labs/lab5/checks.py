"""Lab 5's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py), read from what
the jobs left: the step logs the training writes, Slurm's jobcomp records, the learner's metrics CSV and scaling
report, and the Kubernetes manifests. plan.py submits, preempts and sweeps the jobs and hands each evaluator what it
reads (the jobs are one procedure, not runs of their own); every number here is the checker's own reading, compared
with the learner's. Thresholds are stated here, each with its reason.
"""
from __future__ import annotations

import json
import re
import statistics
from datetime import datetime
from pathlib import Path

from checker import seams, slurm
from checker.labs._common import Check, declare, error_result
from checker.labs.lab5 import DEADLINE_S, LAB, STEPS, SWEEP, WARN_AT, WHERE, refuse
from checker.report import CheckResult

MIN_SIGNAL_LEAD_S = 60  # a warning must leave time to checkpoint: Slurm may deliver it up to 60 s late

CHECKS: list[Check] = []
check = declare(CHECKS)


# A starter's TODO and the lines that continue it (checker/starters.py cuts it to 120 columns): comment lines
# indented under its text, or the further arguments of an `echo '...' \` line.
_TODO = re.compile(r"TODO\(lab5\):[^\n]*(?:\n[ \t]*#[ \t]{2,}\S[^\n]*|(?<=\\)\n[ \t]*'[^\n]*)*")


def todo_prefix(files) -> str:
    """'not written yet: TODO(lab5): ...; ' for the first TODO left in these learner files, else ''."""
    for f in files:
        m = _TODO.search(f.read_text(errors="replace")) if f.is_file() else None
        if m:
            todo = re.sub(r"'?\s*\\?\n[ \t]*[#']?[ \t]*", " ", m[0])  # the cut lines, joined again
            return f"not written yet: {todo.removesuffix(' >&2; exit 1').rstrip(chr(39)).strip()} ({f.name}); "
    return ""


def _records(log: Path):
    """Every JSON record of a training log, in order (a line cut short by a kill is skipped)."""
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                continue


def read_events(log: Path) -> tuple[list[dict], dict[int, dict]]:
    """(event records in order, {step: last record}) of a training log, read by the checker."""
    events, steps = [], {}
    for r in _records(log):
        if "event" in r:
            events.append(r)
        elif isinstance(r.get("step"), int):
            steps[r["step"]] = r
    return events, steps


def steps_of_run(log: Path, restart: int) -> int:
    """How many steps the run with this SLURM_RESTART_COUNT has logged so far."""
    n, current = 0, None
    for r in _records(log):
        if r.get("event") == "start":
            current = r.get("restart_count")
        elif current == restart and "loss" in r:
            n += 1
    return n


def _slurm_log_tail(runs: Path, job: str, n: int = 12) -> str:
    p = runs / f"slurm-{job}.log"
    return "\n".join(p.read_text(errors="replace").splitlines()[-n:]) if p.exists() else ""


# A Python exception line in a job's log, as a rank or torchrun prints it: `srun -l`'s "0: " and torch's "[rank1]:"
# prefixes allowed. torchrun's own SignalException (the expected reaction to the warning) and ChildFailedError (its
# summary of a rank's failure, without the rank's traceback) are symptoms, never the cause.
_PREFIX = r"(?:\d+:\s*)?(?:\[(?:default)?rank\d+\]:\s*)?"
_EXC = re.compile(rf"^{_PREFIX}((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::\s?(.*))?$")
_FRAME = re.compile(rf'^{_PREFIX}\s*File "([^"]+)", line (\d+), in (\S+)')
_SYMPTOMS = ("SignalException", "ChildFailedError")


def _shown(path: str) -> str:
    """A frame's file as the learner knows it: from labs/ (or solutions/) on, else as printed."""
    m = re.search(r"(?:^|/)((?:labs|solutions)/.*)$", path)
    return m[1] if m else path


def job_crash(runs: Path, job: str) -> tuple[str, str] | None:
    """(why, traceback) when the job's ranks raised a Python exception, read from its Slurm log (where srun puts
    every rank's and torchrun's output), else None. A `TODO(labN)` NotImplementedError wins over any other exception
    (it is the cause; what follows is the ranks' peers timing out), and torchrun's own tracebacks are skipped."""
    p = runs / f"slurm-{job}.log"
    if not job or not p.exists():
        return None
    lines = p.read_text(errors="replace").splitlines()
    found = []
    for i, line in enumerate(lines):
        m = _EXC.match(line)
        if not m or m[1].rsplit(".", 1)[-1] in _SYMPTOMS:
            continue
        frame = next((f for f in map(_FRAME.match, reversed(lines[max(0, i - 60):i])) if f), None)
        if frame is None:  # an exception line with no traceback above it is some message, not a raise
            continue
        found.append((i, m[1], (m[2] or "").strip(), frame))
    if not found:
        return None
    i, kind, msg, frame = next((f for f in found if "TODO(lab" in f[2]), found[0])
    start = max((k for k in range(max(0, i - 60), i) if "Traceback (most recent call last)" in lines[k]), default=i - 1)
    where = f"{_shown(frame[1])}:{frame[2]}, in {frame[3]}"
    todo = re.search(r"TODO\(lab(\d+)\)", msg)
    short = msg if len(msg) <= 300 else msg[:300].rsplit(" ", 1)[0] + " ..."
    if todo and todo[1] != "5":  # the whole TODO: it ends with the command that shows its hints
        why = (f"job {job}'s ranks stopped at a TODO of lab {todo[1]} ({where}); lab 5's train.py runs your lab 1 "
               f"and lab 2 code: finish lab {todo[1]} first (`checker grade lab{todo[1]}`). {kind}: {msg}")
    elif todo:
        why = f"not written yet: {msg} ({where}; job {job}'s log)"
    else:
        why = f"job {job}'s ranks raised {kind}: {short} ({where}; the job's log, slurm-{job}.log)"
    return why, "\n".join(lines[start:i + 1])


CRASH_HINT = ("The job's Slurm log holds the ranks' traceback (grade -v shows it). Lab 5's train.py imports your lab 1 "
              "and lab 2 code (seeding, the DDP step, the checkpoint): a TODO left there, or an error in it, stops "
              "every job this lab submits, and each check that reads those jobs reports it first.")


def crash_result(c: Check, crash: tuple[str, str], unit: str, threshold=None) -> CheckResult:
    """The failed check for a crashed job: the exception as the message, its traceback on -v."""
    return CheckResult(c.name, False, None, threshold, unit, crash[0], CRASH_HINT, crash[1],
                       cause="todo" if "TODO(lab" in crash[0] else "error")


def first_crash(runs: Path, jobs) -> tuple[str, str] | None:
    """job_crash of the first of these jobs whose ranks raised; a TODO(labN) crash before any other."""
    crashes = [c for c in (job_crash(runs, j) for j in jobs if j) if c]
    return next((c for c in crashes if "TODO" in c[0]), crashes[0]) if crashes else None


def sbatch_directives(text: str) -> list[str]:
    """The options sbatch reads: #SBATCH lines before the first command (a later one is a plain comment)."""
    out = []
    for line in text.splitlines()[1:]:  # after the shebang
        s = line.strip()
        if s.startswith("#SBATCH"):
            out.extend(s[len("#SBATCH"):].split("#")[0].split())
        elif s and not s.startswith("#"):
            break
    return out


def script_problems(text: str) -> list[str]:
    opts = sbatch_directives(text)
    problems = []
    if "--requeue" not in opts or "--no-requeue" in opts:
        problems.append("no #SBATCH --requeue (without it a preempted job is cancelled, not requeued)")
    if "--open-mode=append" not in opts:
        problems.append("no #SBATCH --open-mode=append (the requeued run would truncate the first run's log)")
    sig = next((o.split("=", 1)[1] for o in opts if o.startswith("--signal=")), None)
    m = re.fullmatch(r"(B:)?(SIG)?USR1@(\d+)", sig or "")
    if not m:
        problems.append(f"no #SBATCH --signal=B:USR1@N (found {sig!r})" if sig else "no #SBATCH --signal=B:USR1@N")
    elif not m[1]:
        problems.append(f"--signal={sig} signals the job steps, not the batch shell: use B:USR1@N so your trap runs")
    elif int(m[3]) < MIN_SIGNAL_LEAD_S:
        problems.append(f"--signal={sig}: {m[3]} s of warning; Slurm may send it up to 60 s late, so ask for >= "
                        f"{MIN_SIGNAL_LEAD_S}")
    return problems


@check("batch_script_valid", "train.sbatch passes `sbatch --test-only` and asks for --requeue, "
       "--open-mode=append and --signal=B:USR1@N (N >= 60)",
       f"{WHERE}/train.sbatch: Slurm takes a job's preemption policy from the header, at submission: may the job "
       "be requeued, does a second run append to the log or overwrite it, and which process is warned, how early "
       "(Slurm may be 60 s late)? #SBATCH lines after the first command are plain comments. "
       "(checker hint lab5 train.sbatch.1)",
       needs=("slurm",))
def batch_script_valid(c: Check, script: Path, env: dict) -> CheckResult:
    """sbatch's own test of the script (--test-only, in the grade's client environment), then the header's rules."""
    ok, said = slurm.test_only(script, env)
    problems = ([] if ok else [f"sbatch --test-only: {said}"]) + script_problems(script.read_text())
    return CheckResult(c.name, not problems, len(problems), 0, "problems",
                       todo_prefix([script]) + "; ".join(problems)
                       or f"sbatch --test-only: {said.splitlines()[-1] if said else 'ok'}",
                       c.hint if problems else "")


def check_flag(run, signal_at: int) -> str | None:
    """Why PreemptionFlag is not a collective (task_flag), or None."""
    err = run.error()
    if err:
        return (f"PreemptionFlag on 2 ranks, SIGTERM to rank 1 alone before step {signal_at}: "
                f"{err.get('type', 'error')}: {err.get('message', '')[:300]}")
    said = {r["rank"]: r["said"] for r in run.results}
    want = [k >= signal_at for k in range(len(said[1]))]
    if said[0] == said[1] == want:
        return None
    return (f"PreemptionFlag on 2 ranks, SIGTERM to rank 1 alone before step {signal_at}: should_stop said "
            f"{said[0]} on rank 0 and {said[1]} on rank 1 (steps 0-{len(want) - 1}); every rank must say True from "
            "that step on: one node hears the warning first, and a rank that stops alone leaves the others in a "
            "collective")


def check_refusal(run) -> str | None:
    """Why resume did not refuse a 2-rank checkpoint at 1 rank (task_flag, refuse.py), or None."""
    mine = next((r.get("refusal") for r in run.results if r.get("rank") == 0), None) if not run.error() else None
    if mine and mine.get("raised_outside"):
        err = mine["raised_outside"]
        return (f"a checkpoint saved by 2 ranks for resume's world-size test: {err.get('type', 'error')}: "
                f"{err.get('message', '')[:300]} ({err.get('where') or 'lab 2'}: save_checkpoint)")
    return refuse.verdict(mine)


SAVED_AFTER_REQUEUE_S = 1.5  # jobcomp's EndTime has whole seconds (the requeue at 12:00:00.9 reads 12:00:00):
# a save finished before the requeue is at most 1 s after it; one the requeue did not wait for ends the preempted
# job's --save-delay (SAVE_DELAY_S: 3 s) after it


def _requeued_before_saved(events: list[dict], first_run: dict) -> str | None:
    """Run 1 is interrupted by the warning alone, so the only requeue that ends it is the batch shell's own, and
    jobcomp's EndTime of run 1 is the moment of that `scontrol requeue`. The ranks' "preempted" record is written
    once the checkpoint is saved: later than that moment means the shell requeued the job while its step was still
    saving. Slurm then SIGTERMs the step and SIGKILLs it after KillWait (10 s here, 30 s by default): a save that
    takes longer is cut off. (Both clocks are this machine's here; on a cluster, the controller's and the node's.)"""
    saved, run = None, None
    for e in events:
        if e.get("event") == "start":
            run = e.get("restart_count")
        elif e.get("event") == "preempted" and run == 0:
            saved = e.get("time")
            break
    try:
        requeued = datetime.fromisoformat(first_run["EndTime"]).timestamp()
    except (KeyError, ValueError):
        return None
    if not isinstance(saved, (int, float)) or saved - requeued <= SAVED_AFTER_REQUEUE_S:
        return None
    return (f"run 1 was requeued at {first_run['EndTime'][11:]} (its jobcomp EndTime) while its ranks were still "
            f"saving: their checkpoint was written at {datetime.fromtimestamp(saved):%H:%M:%S.%f}"[:-5]
            + f", {saved - requeued:.1f} s later. The batch shell requeued before the step had ended: does its "
            "wait return when the USR1 trap has run, not when srun has exited? Slurm SIGKILLs a requeued job's "
            "processes KillWait after the requeue (30 s by default): a longer save is cut off, and run 2 falls "
            "back to an older checkpoint")


def preempted_job(c: Check, job, said, runs, ref, records, left, notes, stalled=None) -> CheckResult:
    """preempt_resume's verdict on the preempted job: it completed, over 2 runs or more, requeued only once its ranks
    had saved, and resumed to losses bit-identical to the uninterrupted job `ref` (the sweep's 2-rank job)."""
    def fail(msg, value=None, details=""):
        return CheckResult(c.name, False, value, 0.0, "max |loss diff|", msg, c.hint, details)

    if not job:
        return fail(f"sbatch refused the script: {said}")
    tail = _slurm_log_tail(runs, job)
    todo = re.search(r"TODO\(lab5\)[^\n]*", tail)
    if todo:
        return fail(f"not written yet: {todo[0]} (the job's log, {runs.name}/slurm-{job}.log)", details=tail)
    if crash := job_crash(runs, job):  # the cause, before its symptoms (an early end, a missing run, a timeout)
        return crash_result(c, crash, "max |loss diff|", 0.0)
    if job in left:  # the deadline, or a stalled job (this one or the sweep's) ended the wait
        return fail("; ".join(notes) if stalled else f"job {job} was still queued or running after {DEADLINE_S} s; "
                    f"cancelled. {'; '.join(notes)}", details=tail)
    mine = slurm.finished(job, records)
    if not mine or mine[-1]["JobState"] != "COMPLETED":
        state = mine[-1]["JobState"] if mine else "unknown (no jobcomp record)"
        return fail(f"job {job} ended {state}; {'; '.join(notes) or 'it was never preempted'}", details=tail)
    events, steps = read_events(runs / job / "log.jsonl")
    starts = [e for e in events if e.get("event") == "start"]
    if len(starts) < 2:
        return fail(f"the log shows {len(starts)} run(s), not 2 or more: the warning did not lead to a requeue "
                    f"({'; '.join(notes)})", details=tail)
    if early := _requeued_before_saved(events, mine[0]):
        return fail(early, details=tail)
    if starts[1].get("resumed_from", 0) == 0:
        return fail("run 2 started from step 0: it did not find (or load) the checkpoint run 1 left", details=tail)
    if ref is None:
        return fail("the uninterrupted reference (your sweep's 2-rank job) did not run: see metrics_complete")
    _, ref_steps = read_events(runs / ref / "log.jsonl")
    if sorted(steps) != list(range(1, STEPS + 1)) or sorted(ref_steps) != list(range(1, STEPS + 1)):
        return fail(f"steps logged: preempted job {len(steps)}, reference {len(ref_steps)}, expected {STEPS} each")
    diffs = [abs(steps[s]["loss"] - ref_steps[s]["loss"]) for s in range(1, STEPS + 1)]
    first = next((s for s in range(1, STEPS + 1) if diffs[s - 1] != 0), None)
    runs_seen = f"{len(starts)} runs (resumed at {', '.join(str(e.get('resumed_from')) for e in starts[1:])})"
    if first is not None:
        return fail(f"{runs_seen}; losses diverge from the uninterrupted job {ref} at step {first}: the resume "
                    "lost state (optimizer moments, sampler position, RNG) or the ranks stopped at different steps",
                    max(diffs))
    return CheckResult(c.name, True, 0.0, 0.0, "max |loss diff|",
                       f"{runs_seen}; all {STEPS} losses bit-identical to job {ref}")


@check("preempt_resume", f"the checker preempts your job twice ({WARN_AT} steps into each run: USR1 to the "
       "batch shell, then `scontrol requeue`); it completes with losses bit-identical to an uninterrupted run",
       "Read the job's Slurm log run by run (its tail: grade -v). No checkpoint or requeue after the warning: "
       "who got the signal, and did the batch shell wait for the ranks to save before requeueing "
       f"({WHERE}/train.sbatch)? A hang or mixed steps: the ranks must agree on the step they stop at "
       f"({WHERE}/preemption.py). Losses differ after the resume: what run 2 loads and the step it continues "
       f"from ({WHERE}/restart.py). (checker hint lab5 train.sbatch.3)",
       needs=("slurm",))
def preempt_resume(c: Check, flag, signal_at: int, job, said, runs, ref, records, left, notes,
                   stalled=None) -> CheckResult:
    """The preempted job (preempted_job), then PreemptionFlag on 2 ranks with one signalled (check_flag) and resume's
    refusal of another world size's checkpoint (check_refusal): the flag run's two parts, task_flag."""
    result = preempted_job(c, job, said, runs, ref, records, left, notes, stalled)
    if result.passed and (wrong := check_flag(flag, signal_at) or check_refusal(flag)):
        return CheckResult(c.name, False, None, None, "max |loss diff|", wrong, c.hint, "")
    return result


def _close(got: str, value: float, tol: float) -> bool:
    try:
        return abs(float(got) - value) <= tol
    except ValueError:
        return False


def _expected_row(job: str, records: list[dict], runs: Path) -> dict:
    mine = slurm.finished(job, records)

    def secs(a, b):
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()
    _, steps = read_events(runs / job / "log.jsonl")
    rates = [r["tokens"] / r["step_s"] for r in steps.values() if r.get("step_s") and r.get("tokens")]
    elapsed = sum(secs(r["StartTime"], r["EndTime"]) for r in mine)
    return {"state": mine[-1]["JobState"], "runs": len(mine),
            "queue_wait_s": sum(secs(r["SubmitTime"], r["StartTime"]) for r in mine),
            "elapsed_s": elapsed,
            "tokens_per_s": statistics.median(rates) if rates else None,
            # the wrong waits a learner computes, each with its likely cause (metrics_complete names it)
            "queue_wait_wrong": [
                (secs(mine[-1]["SubmitTime"], mine[-1]["StartTime"]), "the last run's wait only: each requeue "
                 "resets SubmitTime, so every run's line holds its own wait; add them"),
                (secs(mine[0]["SubmitTime"], mine[-1]["EndTime"]) - elapsed, "everything that was not running: "
                 "between one run's EndTime and the next run's SubmitTime the job was being requeued, neither "
                 "queued nor running; a run waits from its own SubmitTime to its StartTime")]}


@check("metrics_complete", "collect() + write_csv(): one row per job with state, runs, queue wait, elapsed, "
       "tokens/s, each equal to the checker's reading of the jobcomp records and step logs",
       f"{WHERE}/jobmetrics.py: a requeued job leaves one jobcomp line per run (JobState=PENDING, then the final "
       "state), and each requeue resets SubmitTime: a job's runs, wait and run time span all its lines, not the "
       "last. Compare the wrong cells with the jobcomp file. (checker hint lab5 jobmetrics.job_row)",
       needs=("slurm",))
def metrics_complete(c: Check, col, csv_path, finished, runs, records, sweep, array, stalled=None) -> CheckResult:
    """Every finished job's row of the learner's CSV (the collect run's), cell by cell against _expected_row."""
    import csv

    def fail(msg, value=None, details=""):
        return CheckResult(c.name, False, value, 0, "wrong or missing cells", msg, c.hint, details)

    if sweep.error():
        return error_result(c, sweep.error(), "wrong or missing cells")
    if crash := first_crash(runs, finished):  # a job that crashed has no rows to compare: say why, not "no row"
        return crash_result(c, crash, "wrong or missing cells", 0)
    if col.error():
        return error_result(c, col.error(), "wrong or missing cells")
    if len(finished) < 2:
        return fail(f"only {len(finished)} of the checker's jobs finished (array {array}): nothing to collect"
                    + (f"; {stalled}" if stalled else ""))
    try:
        with open(csv_path, newline="") as f:
            rows = {r.get("job_id"): r for r in csv.DictReader(f)}
    except OSError as e:
        return fail(f"no CSV at {csv_path.name}: {e}")
    wrong = []
    for job in finished:
        row = rows.get(job)
        if row is None:
            wrong.append(f"job {job}: no row")
            continue
        want = _expected_row(job, records, runs)
        for key, tol in (("state", None), ("runs", 0), ("queue_wait_s", 1.0), ("elapsed_s", 1.0),
                         ("tokens_per_s", 0.01)):
            got = row.get(key)
            if got in (None, ""):
                wrong.append(f"job {job}: {key} empty")
            elif tol is None:
                if got != want[key]:
                    wrong.append(f"job {job}: {key} {got!r}, the jobcomp record says {want[key]!r}")
            elif want[key] is not None:
                if not _close(got, want[key], tol * want[key] if key == "tokens_per_s" else tol):
                    why = next((w for v, w in want["queue_wait_wrong"] if abs(v - want[key]) > tol
                                and _close(got, v, tol)), None) if key == "queue_wait_s" else None
                    wrong.append(f"job {job}: {key} {got}, the checker reads {want[key]:.1f}"
                                 + (f" (yours is {why})" if why else ""))
    if wrong:
        return fail("; ".join(wrong[:4]) + (f"; and {len(wrong) - 4} more" if len(wrong) > 4 else ""), len(wrong))
    return CheckResult(c.name, True, 0, 0, "wrong or missing cells",
                       f"{len(finished)} jobs, every cell equal to the checker's reading")


@check("scaling_curve", f"scaling_table() + write_report() from the sweep's real jobs at world sizes {SWEEP}: "
       "speedup and efficiency equal tokens/s(N) / (N x tokens/s(1)); a PNG plot and a markdown table",
       f"{WHERE}/report.py: weak scaling, so N ranks process N times the tokens; efficiency is the measured "
       "tokens/s over the ideal, which is linear from the smallest world size measured, and only COMPLETED jobs "
       "that logged a rate are measurements. (checker hint lab5 report.scaling_table)",
       needs=("slurm",))
def scaling_curve(c: Check, col, rep, jobs, runs, records, throttle=(None, None)) -> CheckResult:
    """Recompute the table from every COMPLETED job the CSV holds (the preempted one is a 2-rank job too). `col`: the
    collect run that wrote the CSV (metrics_complete's); `rep`: the report run, None where there was no CSV to report.
    `throttle`: (the sweep's array id, its ArrayTaskThrottle as scontrol read it after submission, or None)."""
    def fail(msg, value=None):
        return CheckResult(c.name, False, value, 0.01, "max |efficiency diff|", msg, c.hint)

    if crash := first_crash(runs, jobs):  # the sweep's jobs crashed: no curve can be drawn, and that is why
        return crash_result(c, crash, "max |efficiency diff|", 0.01)
    if col.error():
        err = col.error()
        return CheckResult(c.name, False, message="needs metrics_complete's CSV first: " + (
            f"not written yet: {err['todo']}" if err.get("todo") else f"{err['type']}: {err.get('message', '')}"),
            hint=c.hint)
    if rep.error():
        return error_result(c, rep.error(), "max |efficiency diff|")
    array, limit = throttle
    if limit is not None and limit != 1:  # 0: no limit
        return fail(f"the sweep's array {array} may run {limit or 'all its'} tasks at once (`scontrol show job "
                    f"{array}`: {f'ArrayTaskThrottle={limit}' if limit else 'no ArrayTaskThrottle'}): on a node with "
                    "room for two, the world sizes would be measured while competing for the same cores (this "
                    "node, 2 CPUs, happens to run them one by one). Ask the array for one task at a time: %1 after "
                    "its index range (sweep.py)")
    per_size: dict[int, list[float]] = {}
    for j in jobs:
        _, steps = read_events(runs / j / "log.jsonl")
        row = _expected_row(j, records, runs)
        if steps and row["state"] == "COMPLETED" and row["tokens_per_s"]:
            per_size.setdefault(next(iter(steps.values()))["world_size"], []).append(row["tokens_per_s"])
    by_size = {size: statistics.median(v) for size, v in per_size.items()}
    if len(by_size) < 2:
        return fail(f"the sweep completed at world sizes {sorted(by_size)}: a curve needs 2 or more")
    base = min(by_size)
    table = {int(t["world_size"]): t for t in rep.result.get("table", [])}
    diffs = []
    for size, tps in by_size.items():
        want = tps / (size / base * by_size[base])
        if size not in table:
            return fail(f"scaling_table has no world size {size}")
        diffs.append(abs(float(table[size]["efficiency"]) - want))
    png, md = Path(rep.result.get("png", "")), Path(rep.result.get("md", ""))
    if not png.is_file() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        return fail(f"write_report's plot {png.name or '(none)'} is not a PNG file")
    if not md.is_file() or "|" not in md.read_text():
        return fail(f"write_report's table {md.name or '(none)'} is not a markdown table")
    if max(diffs) > 0.01:
        return fail(f"efficiency differs from tokens/s(N) / (N x tokens/s(1)) by {max(diffs):.3f}", max(diffs))
    effs = ", ".join(f"{s} ranks {table[s]['efficiency']:.0%}" for s in sorted(by_size))
    return CheckResult(c.name, True, max(diffs), 0.01, "max |efficiency diff|",
                       f"efficiency {effs}; plot and table written")


@check("k8s_manifests_valid", "k8s/*.yaml: an Indexed Job + headless Service running torchrun, and a Kubeflow "
       "PyTorchJob, valid against the pinned Kubernetes schema and consistent with each other",
       f"{WHERE}/k8s/: each problem listed names a field; ask what train.sbatch does there (k8s/README.md maps "
       "every field to it): how many nodes and at once, each node's rank, a rendezvous host known in advance, "
       "what counts as a failure, the time between the polite signal and the kill. "
       "(checker hint lab5 torchrun-job.yaml.1)")
def k8s_manifests_valid(c: Check, h) -> CheckResult:
    """The graded tree's k8s/ folder, validated offline (k8s.py): no Slurm, no cluster."""
    from checker.labs.lab5 import k8s

    folder = h.root / h.target / seams.SEAMS[LAB].folder / "k8s"
    problems = [str(p) for p in k8s.validate_manifests(folder)]
    if problems:
        return CheckResult(c.name, False, len(problems), 0, "problems", todo_prefix(sorted(folder.glob("*.yaml")))
                           + "; ".join(problems[:3])
                           + (f"; and {len(problems) - 3} more (-v)" if len(problems) > 3 else ""), c.hint,
                           "\n".join(problems))
    return CheckResult(c.name, True, 0, 0, "problems", f"{folder.name}/: valid against Kubernetes "
                       f"{k8s.K8S_VERSION}, Job/Service/PyTorchJob consistent")
