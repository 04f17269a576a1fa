"""Instructor mode on a Slurm cluster: a class's grade as one job array, collected into the same class report.

    checker grade lab2 --submissions hand-ins/ --slurm [--partition P] [--gpus-per-learner G] [--parallel N]
    checker grade lab2 --submissions hand-ins/ --slurm --rerun-missing     # only who has no finished grade

The learners are cut into groups of --learners-per-task (by default up to 3, as many as keep every slot of the
partition busy), and each group is one task of an array (REPORT_DIR/slurm/array.sh, written here and submitted
with sbatch). A task grades its learners on its compute node exactly as the local batch does
(checker/slurm_task.py -> batch.grade_learner: sandboxed, one hidden variant for all, the per-learner budget)
and writes each learner's report to REPORT_DIR/slurm/learners/. This command waits, printing a progress line
(learners done / running / pending / failed) and each learner's line as their report appears, rewriting the
class report as the local batch does (batch.write_reports: class.csv, class.junit.xml, class.json, class.html).
REPORT_DIR, the submissions and the course checkout must be on a filesystem the compute nodes see at the same
paths (the usual shared home or project space).

What Slurm does to a task, and what the report says:
- requeued (node failure, preemption: `#SBATCH --requeue`; or `scontrol requeue`): it runs again and grades the
  learners of its group that have no report yet; the learner it was grading is not failed for it;
- past its time limit: the learner it was grading fails every check as hung, with the reason;
- cancelled (`scancel`), or ended without a report: its learners without one are missing, reported as NOT RUN
  with cause `missing`, and `--rerun-missing` grades only them (and those whose grade did not finish).
"""
from __future__ import annotations

import json
import math
import secrets
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from checker import batch, sandbox, slurm, slurm_task
from checker.harness import REPO_ROOT

# One task holds up to this many learners. A lab's grade takes 25-60 s (bench/results.json: 24-26 s on 2 CPU cores;
# bench/RESULTS-gpu.md: 28-36 s on a GPU), and a task costs Slurm a scheduling pass and the checker a start-up
# of a few seconds: 3 learners make a task of 1-3 minutes, in which that overhead is a few percent.
MAX_PER_TASK = 3
TASK_START_S = 60    # time limit per learner, over their budget: copying their tree, the checker's start
SIGNAL_LEAD_S = 90   # --signal=B:USR1@90: a task about to reach its limit fails the learner in progress, in time
# Memory per learner: a grade runs at most 2 runs at once, of up to 3 ranks of the `tiny` model, each a torch
# process of at most ~0.32 GB resident (the largest seen while lab 1 was graded here), plus the checker and its
# fork server: 8 x 0.32 = ~2.6 GB; 4 GB leaves room. Without --mem a job may be given the whole node's memory,
# and then one task would fill a node.
MEM_PER_LEARNER = "4G"
POLL_S = 2.0
SILENT_S = 600  # a controller that stops answering for this long: the command gives up waiting (not the array)


def groups_of(learners: list[str], per_task: int) -> list[list[str]]:
    return [learners[i:i + per_task] for i in range(0, len(learners), per_task)]


def default_per_task(n_learners: int, slots: int | None) -> int:
    """As many learners per task as keeps every slot of the partition with a task (the last tasks are the
    batch's tail), never over MAX_PER_TASK."""
    return max(1, min(MAX_PER_TASK, n_learners // max(1, slots or 1)))


def time_limit_min(per_task: int, budget: float) -> int:
    """Each learner's budget plus its start, and the lead of the USR1 warning, in whole minutes (Slurm's unit)."""
    return math.ceil((per_task * (budget + TASK_START_S) + SIGNAL_LEAD_S) / 60)


def array_script(m: dict, slurm_dir: Path, cpus: int, partition: str | None, gpus: int, throttle: int | None) -> str:
    n = len(m["groups"])
    lines = [
        "#!/bin/bash",
        f"# Written by `checker grade {m['lab']} --submissions ... --slurm` (checker/batch_slurm.py): task i grades",
        "# the learners of manifest.json's groups[i], one after another, with checker/slurm_task.py.",
        f"#SBATCH --job-name={m['job_name']}",
        f"#SBATCH --array=0-{n - 1}" + (f"%{throttle}" if throttle else ""),
        f"#SBATCH --cpus-per-task={cpus}",
        f"#SBATCH --mem={MEM_PER_LEARNER}",
        f"#SBATCH --time={m['time_min']}",
        "#SBATCH --requeue",
        f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD_S}",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={slurm_dir}/logs/task-%A_%a.log",
        f"#SBATCH --chdir={slurm_dir}",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if gpus:
        lines.append(f"#SBATCH --gres=gpu:{gpus}")
    lines += [f"export PYTHONPATH={REPO_ROOT}",
              f"exec {sys.executable} -m checker.slurm_task {slurm_dir / 'manifest.json'}"]
    return "\n".join(lines) + "\n"


def partition_slots(partition: str | None, cpus: int) -> int | None:
    """How many tasks of `cpus` CPUs the partition's nodes hold at once (`sinfo`: CPUs per node)."""
    try:
        r = slurm._run(["sinfo", "-h", "-N", "-o", "%N %c", *(["-p", partition] if partition else [])])
    except (OSError, slurm.subprocess.TimeoutExpired):
        return None
    per_node = {}
    for line in r.stdout.splitlines():
        node, _, c = line.partition(" ")
        if c.strip().isdigit():
            per_node[node] = int(c)
    return sum(c // cpus for c in per_node.values()) or None


def missing(lab: str, why: str, only, rerun: str) -> dict:
    return slurm_task.incomplete(lab, f"not graded: {why}", only, cause="missing", status="not_run", hint=rerun)


def collect(m: dict, slurm_dir: Path, records: dict[int, dict], rerun: str) -> dict[str, dict]:
    """Every learner's entry once the array has ended: their report, or why there is none."""
    out = {}
    lab, only = m["lab"], m["only"]
    task_of = {name: i for i, group in enumerate(m["groups"]) for name in group}
    for name in m["learners"]:
        path, marker = slurm_task.report_path(slurm_dir, name), slurm_task.marker_path(slurm_dir, name)
        if path.exists():
            out[name] = json.loads(path.read_text())
            continue
        if name not in task_of:
            out[name] = missing(lab, "an earlier grade on Slurm did not reach them", only, rerun)
            continue
        rec = records.get(task_of[name], {})
        state = rec.get("JobState", "unknown: no job record")
        where = f"task {task_of[name]} of array {m['array']}"
        grading = marker.exists() and json.loads(marker.read_text()).get("array") == m["array"]
        if grading and state == "TIMEOUT":
            out[name] = slurm_task.incomplete(lab, f"hung: its Slurm task ({where}) ran past its time limit "
                                                   f"({m['time_min']} min) while grading it", only, cause="hang")
        elif grading and not state.startswith("CANCELLED"):
            log = slurm_dir / "logs" / f"task-{m['array']}_{task_of[name]}.log"
            tail = (log.read_text(errors="replace").strip().splitlines()[-1:] or [""])[0] if log.exists() else ""
            out[name] = slurm_task.incomplete(
                lab, f"could not be graded: its Slurm task ({where}) ended {state} while grading it"
                     + (f"; its log ({log}) ends: {tail[:200]}" if tail else ""), only, cause="error")
        else:
            said = "was cancelled (scancel)" if state.startswith("CANCELLED") else f"ended {state}"
            out[name] = missing(lab, f"its Slurm task ({where}) {said} before grading them", only, rerun)
    return out


def progress(m: dict, slurm_dir: Path, states: dict[int, str]) -> dict[str, int]:
    """Learners done / running / pending / failed (a grade that did not finish, or a task gone without it)."""
    count = {"done": 0, "running": 0, "pending": 0, "failed": 0}
    for i, group in enumerate(m["groups"]):
        for name in group:
            path = slurm_task.report_path(slurm_dir, name)
            if path.exists():
                count["failed" if "incomplete" in json.loads(path.read_text()) else "done"] += 1
            elif i not in states:
                count["failed"] += 1
            else:
                count["running" if states[i] == "RUNNING" and
                      slurm_task.marker_path(slurm_dir, name).exists() else "pending"] += 1
    return count


def submit(m: dict, slurm_dir: Path, cpus: int, partition: str | None, gpus: int, throttle: int | None) -> str:
    (slurm_dir / "logs").mkdir(parents=True, exist_ok=True)
    (slurm_dir / "learners").mkdir(exist_ok=True)
    script = slurm_dir / "array.sh"
    m["array"] = None
    script.write_text(array_script(m, slurm_dir, cpus, partition, gpus, throttle))
    slurm_task.write_json(slurm_dir / "manifest.json", m)  # before sbatch: a task may start at once
    job, said = slurm.sbatch(script, [], slurm.client_env({}))
    if job is None:
        raise ValueError(f"sbatch refused the grading array ({script}): {said}")
    m["array"] = job
    slurm_task.write_json(slurm_dir / "manifest.json", m)
    return job


def grade_all(lab: str, submissions: Path, variant: int, report_dir: Path, console: Console,
              only: list[str] | None = None, no_sandbox: bool = False, device: str = "auto", no_hints: bool = False,
              verbose: bool = False, budget: float | None = None, partition: str | None = None,
              gpus_per_learner: int = 0, cpus_per_learner: int = 1, per_task: int | None = None,
              throttle: int | None = None, rerun_missing: bool = False) -> bool:
    learners = [p.name for p in batch.submission_folders(submissions.resolve())]
    report_dir = report_dir.resolve()
    slurm_dir = report_dir / "slurm"
    budget = budget or batch.learner_budget()
    rerun = (f"checker grade {lab} --submissions {submissions} --slurm --rerun-missing"
             + (f" --report-dir {report_dir}" if report_dir.name != f"class-report-{lab}" else ""))
    todo = list(learners)
    if rerun_missing:
        old = slurm_dir / "manifest.json"
        if not old.exists():
            raise ValueError(f"--rerun-missing: no earlier grade on Slurm in {report_dir} (no {old})")
        prev = json.loads(old.read_text())
        if prev["lab"] != lab:
            raise ValueError(f"--rerun-missing: {report_dir} holds a grade of {prev['lab']}, not {lab}")
        if variant and prev["variant"] != variant:
            raise ValueError(f"--rerun-missing grades with the earlier variant {prev['variant']}, not {variant}")
        variant, only = prev["variant"], prev["only"]  # the same grade as the learners graded before
        todo = [n for n in learners if not _finished(slurm_task.report_path(slurm_dir, n))]
    elif (slurm_dir / "learners").is_dir():  # a new grade: nothing of an earlier one may count
        for f in (slurm_dir / "learners").iterdir():
            f.unlink()
    for n in todo:
        slurm_task.report_path(slurm_dir, n).unlink(missing_ok=True)
        slurm_task.marker_path(slurm_dir, n).unlink(missing_ok=True)
    slots = partition_slots(partition, cpus_per_learner)
    per_task = per_task or default_per_task(len(todo), min(slots or 1, throttle or slots or 1))
    m = {"lab": lab, "variant": variant, "only": only, "no_sandbox": no_sandbox, "device": device, "budget": budget,
         "no_hints": no_hints, "submissions": str(submissions.resolve()), "learners": learners,
         "groups": groups_of(todo, per_task), "gpus_per_learner": gpus_per_learner,
         "time_min": time_limit_min(per_task, budget), "job_name": f"checker-grade-{lab}-{secrets.token_hex(3)}",
         "digest": sandbox.course_digest()}
    report_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if todo:
        array = submit(m, slurm_dir, cpus_per_learner, partition, gpus_per_learner, throttle)
        console.print(f"grading {len(todo)} of {len(learners)} submissions of {lab} on Slurm, variant {variant}: "
                      f"array {array}, {len(m['groups'])} task(s) of up to {per_task} learner(s), "
                      f"{cpus_per_learner} CPU(s)" + (f" and {gpus_per_learner} GPU(s)" if gpus_per_learner else "")
                      + f" each, {m['time_min']} min limit" + (f", at most {throttle} at once" if throttle else "")
                      + (f" (the partition holds {slots} at once)" if slots else "") + f"; {slurm_dir}/array.sh")
        note = batch.hang_cost_note(1, budget, others="the learners after it in its task wait, the other tasks go on")
        console.print(f"[dim]{note}[/]")
        most = _wait(m, slurm_dir, array, console, no_hints, verbose, report_dir)
    else:
        console.print(f"every learner in {report_dir} has a finished grade: nothing to re-grade")
        most = 1
    reports = collect(m, slurm_dir, slurm.array_records(m.get("array") or "", m["job_name"], slurm.jobcomp_records())
                      if todo else {}, rerun)
    batch.write_reports(lab, variant, reports, report_dir)
    ok = batch.summarize(lab, reports, variant, only, time.monotonic() - t0, most, report_dir, console, verbose)
    gone = [n for n, r in reports.items() if r["checks"] and r["checks"][0].get("cause") == "missing"]
    if gone:
        console.print(f"[yellow]partial: {len(gone)} learner(s) not graded: {', '.join(gone)}; "
                      f"grade only them with `{escape(rerun)}`[/]")
    return ok and not gone


def _finished(path: Path) -> bool:
    return path.exists() and "incomplete" not in json.loads(path.read_text())


def _wait(m: dict, slurm_dir: Path, array: str, console: Console, no_hints: bool, verbose: bool,
          report_dir: Path) -> int:
    """Until no task of the array is pending or running: the progress line when it changes, each learner's line
    and the class report so far as their reports appear. Ctrl-C cancels the array (no job outlives the command).
    Returns the most tasks seen running at once."""
    shown, seen, most, t0 = None, set(), 1, time.monotonic()
    answered = time.monotonic()
    while True:
        try:
            states = slurm.array_states(array)
            if states is None:  # squeue did not answer this time
                if time.monotonic() - answered > SILENT_S:
                    raise ValueError(f"squeue has not answered for {SILENT_S // 60} minutes; array {array} may still "
                                     "run: see `squeue`, and collect what it grades with --rerun-missing later")
                time.sleep(POLL_S)
                continue
            answered = time.monotonic()
            most = max(most, sum(s == "RUNNING" for s in states.values()))
            new = [n for g in m["groups"] for n in g
                   if n not in seen and slurm_task.report_path(slurm_dir, n).exists()]
            for n in new:
                seen.add(n)
                batch.print_learner(console, n, json.loads(slurm_task.report_path(slurm_dir, n).read_text()),
                                    no_hints, verbose)
            if new:
                done = {n: json.loads(slurm_task.report_path(slurm_dir, n).read_text()) for n in sorted(seen)}
                batch.write_reports(m["lab"], m["variant"], done, report_dir)
            count = progress(m, slurm_dir, states)
            line = ", ".join(f"{v} {k}" for k, v in count.items())
            if line != shown:
                console.print(f"[dim]array {array}: {line} ({time.monotonic() - t0:.0f} s)[/]")
                shown = line
            if not states:
                return most
            time.sleep(POLL_S)
        except KeyboardInterrupt:
            console.print(f"[yellow]interrupted: cancelling array {array}; the report will say who is missing[/]")
            slurm.cancel([array])
            slurm.wait_all([array], time.monotonic() + 60)
            return most
