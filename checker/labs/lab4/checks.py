"""Lab 4's incident checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): the
incident fixed (`fixed`: the learner's job under the incident's conditions) and diagnosed (`diagnosed`: the
diagnosis file against the checker's log of the faulty job), declared for each incident in turn at the end of the
incidents' part; then the forensics checks (forensics.py). The answer key and thresholds live here, each with its
reason. Every evaluator reads the runs and the Facts the grade found beside them (plan.py)."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from checker.labs._common import Check, declare, error_result, first_error
from checker.labs._held_save import TORN
from checker.labs.lab4 import INCIDENTS, WHERE, forensics
from checker.report import CheckResult

# The README lists these causes; the last six are real failure modes that none of the incidents is.
CAUSES = {1: "world_size_mismatch", 2: "collective_mismatch", 3: "straggler", 4: "uneven_shards",
          5: "incomplete_checkpoint", 6: "wrong_interface", 7: "port_in_use", 8: "slow_link"}
VOCABULARY = sorted(set(CAUSES.values()) | {"nan_loss", "out_of_memory", "dataloader_deadlock", "version_mismatch",
                                            "firewall", "disk_full"})
# What an evidence line must show (any one), besides occurring in the checker's own log of the faulty job.
EVIDENCE = {
    1: [r"wait timeout|timed out|DistStoreError", r"SLURM_NTASKS=\d.*|WORLD_SIZE=\d.*SLURM_NTASKS"],
    2: [r"collective mismatch|doesn't match expected size|Timed out waiting"],
    3: [r"rank times after step"],
    4: [r"samples this epoch", r"Timed out waiting"],
    5: [r"optimizer holds state for", r"differs"],
    6: [r"Unable to find address for"],
    7: [r"EADDRINUSE|address already in use"],
    8: [r"link check: .*GB/s"],
}
MIN_EVIDENCE_CHARS = 12
# Incident 3: the work after_step adds, as token positions it runs the model forward on per token trained, on the
# busiest rank; counted by the checker's hook on the model, so a loaded machine cannot move it. Validating once
# every eval_every steps costs VAL_BATCHES batches / eval_every steps: 8 / 4 = 2.0 per trained token; the faulty job
# (every step, one rank) 8.0. The limit allows half as many validations again (one extra in 12 steps: 2.67), not
# validating every other step (4.0). VAL_BATCHES is incident3.py's.
VAL_BATCHES = 8
AFTER_STEP_SLACK = 1.5
REDUCE_PER_STEP_MAX = 1.5  # all-reduced elements per optimizer step / parameters (incident 8)
# Incident 8's side check: train_step's .grad vs the mean loss's gradient, in fp32, as a fraction of the gradient's
# largest entry. Accumulating 4 micro-batches in another order, or averaging 2 or 3 identical ranks, moves it ~1e-7;
# summing instead of averaging moves it by 3x the entry (k - 1 = 3).
ACCUM_TOL = 1e-4

CHECKS: list[Check] = []
check = declare(CHECKS)
# Every check runs the course's own jobs and conditions (solutions/lab4_debugging): none runs in a class handout.
COURSE = ("reference",)


@dataclass(frozen=True)
class Facts:
    """What a grade found beside its runs (plan.py), for the evaluators."""
    logs: dict[int, str] = field(default_factory=dict)  # {incident: the faulty job's log} (evidence.py)
    diagnosis: dict | str = ""  # the learner's diagnosis.toml, or why it can't be read (read_diagnosis)
    scenario: Callable | None = None  # scenario(n, variant): the course's conditions (course.scenarios())
    variant: int = 0
    launch: list[str] | str | None = None  # the learner's torchrun options, or why they can't be used (checked_launch)
    desync_kinds: tuple[str, ...] = ()  # the faulty desync jobs, one per kind (desync.KINDS)
    slow_link: tuple[int, float] | None = None  # (rank, GB/s) of the emulated link the checker slowed
    netns_link: tuple[int, float] | None = None  # (rank, Mbit/s) of the real link the checker shaped


def _incident(c: Check) -> int:
    return int(c.name.rpartition("_incident")[2])


def read_diagnosis(path: Path) -> dict | str:
    """The learner's diagnosis.toml as a dict, or a one-line reason it can't be read."""
    if not path.exists():
        return f"{path.name} not found in {path.parent}"
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        return f"{path.name} is not valid TOML: {e}"


def needs_log(n: int, diagnosis) -> bool:
    """Does checking this diagnosis need the faulty job's log (the right cause, and an evidence line to find)?"""
    entry = diagnosis.get(f"incident{n}") if isinstance(diagnosis, dict) else None
    return isinstance(entry, dict) and entry.get("cause") == CAUSES[n] and bool(str(entry.get("evidence", "")).strip())


def normalise(line: str) -> str:
    """Digits, run prefixes and spacing aside: the checker's variant may move a rank, a step or a port."""
    line = re.sub(r"^(\[(job \d+|uninterrupted|preempted|resumed)\] )+", "", line.strip())
    line = re.sub(r"^\[rank\d+\]:\s*", "", line)
    return re.sub(r"\s+", " ", re.sub(r"\d+", "#", line)).strip().lower()


def occurs(evidence: str, log: str) -> bool:
    want = normalise(evidence)
    return len(want) >= MIN_EVIDENCE_CHARS and any(want in normalise(line) for line in log.splitlines())


def diagnosed(c: Check, runs, facts: Facts) -> CheckResult:
    """The cause from the README's list, and an evidence line that occurs in the checker's log of the faulty job
    and shows that cause."""
    n, logs, diagnosis = _incident(c), facts.logs, facts.diagnosis
    if isinstance(diagnosis, str):
        return CheckResult(c.name, False, message=diagnosis, hint=c.hint)
    entry = diagnosis.get(f"incident{n}") or {}
    cause, evidence = str(entry.get("cause", "")).strip(), str(entry.get("evidence", "")).strip()
    if not cause:
        return CheckResult(c.name, False, message=f"no cause given for incident {n} yet", hint=c.hint)
    if cause not in VOCABULARY:
        return CheckResult(c.name, False,
                           message=f"cause {cause!r} is not in the README's list: {', '.join(VOCABULARY)}",
                           hint=c.hint)
    if cause != CAUSES[n]:
        return CheckResult(c.name, False, message=f"{cause} does not explain incident {n}: look again at what the log "
                                                  "shows first, and at what every rank was doing", hint=c.hint)
    log = logs.get(n, "")
    if not log:
        return CheckResult(c.name, False, message="the checker could not produce the faulty job's log (see info rows)",
                           hint=c.hint)
    if not occurs(evidence, log):
        return CheckResult(c.name, False, hint=c.hint, message=(
            f"the evidence line is not in the checker's log of the faulty job (runs/lab4/evidence/): copy one line, "
            f"at least {MIN_EVIDENCE_CHARS} characters, as it appears there" if evidence else "no evidence line given"))
    if not any(re.search(p, evidence, re.I) for p in EVIDENCE[n]):
        return CheckResult(c.name, False, hint=c.hint,
                           message="that line occurs in the log but does not show the cause: pick the line that "
                                   "proves it")
    return CheckResult(c.name, True, hint=c.hint, message=f"{cause}; evidence found in the faulty job's log")


# ---------------------------------------------------------------- fixed_incidentN
def _job_problems(run_name: str, runs, nproc: int) -> tuple[list[str], dict | None]:
    """What is wrong with one job run, as sentences; or the run's error."""
    err = first_error(runs, run_name)
    if err:
        return [], err
    rs = runs[run_name].results
    problems = []
    if len(rs) != nproc or any(r.get("world_size") != nproc for r in rs):
        problems.append(f"expected {nproc} ranks in a group of {nproc}, got world sizes "
                        f"{[r.get('world_size') for r in rs]}")
    steps = {r["steps_run"] for r in rs}
    if len(steps) > 1:
        problems.append(f"ranks ran different numbers of steps: {sorted(steps)}")
    if len({r["digest"] for r in rs}) > 1:
        problems.append("ranks finished with different weights")
    if not all(r["finite"] for r in rs):
        problems.append("weights are not finite (NaN/inf reached the parameters)")
    losses = [float.fromhex(x) for x in rs[0]["losses"] if x not in ("nan", "inf")]
    if rs[0]["losses"] and (len(losses) < 2 or not losses[-1] < losses[0]):
        problems.append("the loss did not fall")
    return problems, None


def _job_error(c: Check, err: dict, run) -> CheckResult:
    """A job that raised: a collective's timeout (gloo: "Timed out waiting") says where each rank waited, for the
    cause is their disagreement, not the line where the first of them gave up."""
    errors = {i: r.get("error") or {} for i, r in enumerate(run.results if run else [])}
    if not any("Timed out waiting" in e.get("message", "") for e in errors.values()):
        return error_result(c, err)
    # a peer of the rank that gave up first sees its connection close, or is ended before it reports
    where = ", ".join(f"rank {i} at {errors[i].get('where') or 'a line outside your code'}"
                      if re.search(r"Timed out waiting|closed by peer", errors.get(i, {}).get("message", ""))
                      else f"rank {i} ended before it said where" for i in range(run.nproc))
    return error_result(c, {**err, "message": (
        f"the ranks waited for each other until the process group's timeout ({where}): a collective one rank called "
        "and its peer never did (a rank skipped it, or called another first). Every rank must call the same "
        "collectives in the same order"), "where": ""})


def _steps(steps: list[int]) -> str:
    if not steps:
        return "none"
    return ", ".join(map(str, steps[:8])) + (f", ... ({len(steps)} in all)" if len(steps) > 8 else "")


def _skip_problem(sc, rs) -> str | None:
    """Incident 2: why the bad step was not skipped on every rank alone, or None. The bad loss is NaN or, in hidden
    variants, inf (an overflow): a test for NaN alone lets inf through to the weights."""
    (rank, step), value = sc.job["nan_at"], sc.job.get("bad_loss", "nan")
    if all(r["skipped"] == [step] for r in rs):
        return None
    return (f"rank {rank}'s loss is {value} at step {step}: that step must be skipped on every rank and no other; "
            f"skipped per rank: {[r['skipped'] for r in rs]}" + (
                ". An infinite loss is as bad as NaN: does your test catch every non-finite value?"
                if value == "inf" else ""))


def fixed(c: Check, runs, facts: Facts) -> CheckResult:
    """The learner's job under incident n's conditions: completes, ranks in sync, loss falls; and what the incident
    is about (the bad step skipped, eval amortised, equal shards, an exact resume, the interface, two jobs at once,
    one all-reduce of the mean gradient per step)."""
    n, launch = _incident(c), facts.launch
    sc = facts.scenario(n, facts.variant)
    if n == 5:
        return _resume(c, runs, sc)
    if n == 7:
        if not isinstance(launch, list):
            return CheckResult(c.name, False, message=str(launch), hint=c.hint)
        names = ["fixed7_job0", "fixed7_job1"]
    else:
        names = [f"fixed{n}"]
    extra = []
    for name in names:
        problems, err = _job_problems(name, runs, sc.nproc)
        if err and n == 1:  # the conditions the join must read through: which values are the launcher's
            slurm = ", ".join(f"{k}={v}" for k, v in sorted(sc.env.items()))
            err = {**err, "message": f"{sc.nproc} ranks launched (RANK 0-{sc.nproc - 1}, WORLD_SIZE={sc.nproc}) "
                                     f"with {slurm} in every rank's environment: {err.get('message', '')}"}
        if err:
            return _job_error(c, err, runs.get(name))
        if n == 2 and problems:  # the skip is what failed, and NaN in the weights its consequence: say so first
            problems = [_skip_problem(sc, runs[name].results) or problems[0], *problems[1:]]
        if problems:
            return CheckResult(c.name, False, message="; ".join(problems), hint=c.hint)
        extra.append(runs[name].results)
    rs = extra[0]
    value, threshold, unit, note = None, None, "", "completed"
    if n == 2:
        bad = _skip_problem(sc, rs)
        if bad:
            return CheckResult(c.name, False, hint=c.hint, message=bad)
        note = f"step {sc.job['nan_at'][1]} (loss {sc.job.get('bad_loss', 'nan')}) skipped on every rank, weights " \
               "finite"
    if n == 3:
        ratios = [r["tokens"]["after_step"] / max(r["tokens"]["train_step"], 1) for r in rs]
        seconds = [r["timers"]["after_step"] / max(r["timers"]["train_step"], 1e-9) for r in rs]
        amortised = VAL_BATCHES / (sc.job["eval_every"] * sc.job.get("micro_batches", 1))
        value, threshold, unit = max(ratios), AFTER_STEP_SLACK * amortised, "eval tokens per trained token"
        dash = next(r for r in rs if r["rank"] == sc.job["dashboard_rank"])
        want_evals = sc.job["steps"] // sc.job["eval_every"]
        if dash["evals"] < want_evals:
            return CheckResult(c.name, False, value=value, threshold=threshold, unit=unit, hint=c.hint, message=(
                f"the dashboard (rank {dash['rank']}) got {dash['evals']} validation losses in {sc.job['steps']} "
                f"steps; it needs one every {sc.job['eval_every']} steps ({want_evals})"))
        want_steps = list(range(sc.job["eval_every"], sc.job["steps"] + 1, sc.job["eval_every"]))
        got_steps = dash.get("eval_steps") or []
        if got_steps != want_steps:
            return CheckResult(c.name, False, value=value, threshold=threshold, unit=unit, hint=c.hint, message=(
                f"the dashboard (rank {dash['rank']}) got validation losses after steps {_steps(got_steps)}; "
                f"the multiples of eval_every ({sc.job['eval_every']}) in {sc.job['steps']} steps are "
                f"{_steps(want_steps)}"))
        if value > threshold:
            return CheckResult(c.name, False, value=value, threshold=threshold, unit=unit, hint=c.hint, message=(
                "per rank, tokens run forward in after_step per token trained: " + ", ".join(
                    f"r{r['rank']} {x:.2f}" for r, x in zip(rs, ratios)) + f"; validating once every "
                f"{sc.job['eval_every']} steps costs {amortised:.2f} (seconds in after_step per second in train_step: "
                + ", ".join(f"r{r['rank']} {x:.2f}" for r, x in zip(rs, seconds)) + ")"))
        note = (f"after_step runs {value:.2f} tokens forward per token trained on the busiest rank "
                f"({max(seconds):.2f}x train_step's seconds); dashboard got {dash['evals']} evals")
    if n == 4:
        r0 = runs["fixed4"].result
        if r0.get("shards_error"):
            return error_result(c, r0["shards_error"])
        for case in r0["shards"]:
            n_s, w = case["n"], case["world"]
            if len(set(case["lengths"])) > 1 or not case["in_range"] or case["distinct"] < n_s - w + 1 \
                    or case["total"] - case["distinct"] > w - 1:
                return CheckResult(c.name, False, hint=c.hint, message=(
                    f"shard_indices({n_s} samples, world {w}): lengths {case['lengths']}, {case['distinct']} distinct "
                    f"samples; every rank needs the same count, each sample at most once (a few repeats to pad are "
                    "fine)"))
        note = f"{rs[0]['steps_run']} steps on every rank; shard_indices equal-length at 5 sizes"
    if n == 6:
        bad = [r["ifname"] for r in rs if r["ifname"] and r["ifname"] not in r["interfaces"]]
        if bad:
            return CheckResult(c.name, False, hint=c.hint, message=f"GLOO_SOCKET_IFNAME={bad[0]} does not exist here")
        unset = [r for r in rs if not r["ifname"]]
        if unset:  # this job's backend is gloo: with its variable unset it picks an interface of its own
            return CheckResult(c.name, False, hint=c.hint, message=(
                f"COURSE_IFNAME={sc.env.get('COURSE_IFNAME')} but GLOO_SOCKET_IFNAME is unset after configure_network "
                f"on rank {unset[0]['rank']} (NCCL_SOCKET_IFNAME={unset[0].get('nccl_ifname')}): gloo, this job's "
                "backend, then picks its own interface, not the one you checked routes to the master. Point both "
                "backends at it"))
        note = f"interface {rs[0]['ifname'] or '(gloo default)'}"
    if n == 7:
        note = f"two jobs at once with {' '.join(launch)}, port {sc.busy_port} held by another"
    if n == 8:
        r0 = runs["fixed8"].result
        if r0.get("accum_error"):
            return error_result(c, r0["accum_error"])
        acc = r0.get("accum") or {}
        if acc and acc["rel_diff"] > ACCUM_TOL:
            return CheckResult(c.name, False, value=acc["ratio"], threshold=1.0, unit="x the mean gradient",
                               hint=c.hint, message=(
                                   f"train_step on {acc['k']} micro-batches (the checker's, lr 0) left a .grad "
                                   f"{acc['ratio']:.2f}x as large as the gradient of their mean loss (largest "
                                   f"difference {acc['rel_diff']:.1e} of the largest entry): .grad must hold the "
                                   "global batch's mean gradient; each micro-batch's share of it is 1/k"))
        per_step = max(r["reduced_numel"] / max(r["steps_run"], 1) / r["params"] for r in rs)
        value, threshold, unit = per_step, REDUCE_PER_STEP_MAX, "x params all-reduced/step"
        if per_step > threshold or per_step < 0.9:
            return CheckResult(c.name, False, value=value, threshold=threshold, unit=unit, hint=c.hint, message=(
                f"{per_step:.2f} gradients' worth all-reduced per optimizer step with {sc.job['micro_batches']} "
                "micro-batches; one full gradient (1.0) is what the update needs"))
        note = f"{per_step:.2f} gradients all-reduced per step over a {sc.job['link_gbps']} GB/s link"
    return CheckResult(c.name, True, value=value, threshold=threshold, unit=unit, hint=c.hint,
                       message=f"{note}; {rs[0]['steps_run']} steps, ranks in sync, loss falls")


def _resume(c: Check, runs, sc) -> CheckResult:
    for name in ("fixed5_full", "fixed5_preempted", "fixed5_resumed", "fixed5_after", "fixed5_after_resumed"):
        err = first_error(runs, name)
        if err:
            if name == "fixed5_after_resumed":  # the second kill point: a resume that found a file missing
                return CheckResult(c.name, False, hint=c.hint, message=(
                    f"{_held_how(runs['fixed5_after'], sc, after=True)}; the resume failed: {err.get('type')}: "
                    f"{err.get('message', '')[:300]}. A kill at any point of a save must leave a checkpoint whose "
                    "every file exists: the file naming the step is written last"))
            return _job_error(c, err, runs.get(name))
    full = runs["fixed5_full"].results
    hows = []
    for killed, resumed, after in (("fixed5_preempted", "fixed5_resumed", False),
                                   ("fixed5_after", "fixed5_after_resumed", True)):
        wrong, how = _resumed_as_full(full, runs[killed], runs[resumed].results, sc, after)
        if wrong:
            return CheckResult(c.name, False, hint=c.hint, message=wrong)
        hows.append(how)
    return CheckResult(c.name, True, hint=c.hint, message=f"{hows[0]}; a second job {hows[1]}: losses and weights "
                                                          "bit-identical on every rank after each resume")


def _held_how(killed, sc, after: bool) -> str:
    held = [r for r in killed.results if r.get("held")]
    step = sc.job["save_at"] + 2
    what = "the first write after the weights' file" if after else "the weights"
    return (f"killed while rank {held[0].get('rank', 0)} wrote step {step}'s checkpoint, {what} (half of "
            f"{held[0].get('held_path', '?')} written)" if held else
            f"killed after step {step}'s checkpoint (no write of it for the checker to hold)")


def _resumed_as_full(full, killed, resumed, sc, after: bool) -> tuple[str | None, str]:
    """(what went wrong or None, how the kill landed) for one killed job and its resume, against the uninterrupted
    one. The last complete checkpoint: the first (step save_at) where a write of the second was held, else the
    second (the kill came after it)."""
    held = any(r.get("held") for r in killed.results)
    save_at = sc.job["save_at"] + (0 if held else 2)
    how = _held_how(killed, sc, after)
    for a, b in zip(sorted(full, key=lambda r: r["rank"]), sorted(resumed, key=lambda r: r["rank"])):
        if b.get("start") is not None and b["start"] != save_at:
            return (f"{how}: the last complete checkpoint is step {save_at}; rank {a['rank']} resumed at step "
                    f"{b['start']}"), how
        want, got = a["losses"][save_at:], b["losses"]
        if want != got:
            first = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y), min(len(want), len(got)))
            w = float.fromhex(want[first]) if first < len(want) else float("nan")
            g = float.fromhex(got[first]) if first < len(got) else float("nan")
            return (f"{how}; rank {a['rank']}: after resuming at step {save_at}, step {save_at + first + 1}'s loss is "
                    f"{g:.6f}, uninterrupted {w:.6f}"), how
        if a["digest"] != b["digest"]:
            return f"{how}; rank {a['rank']}: losses equal but final weights differ", how
    return None, f"{how}, resumed at step {save_at}"


def checked_launch(run):
    """The learner's torchrun options (asked on the side of incident 3's run), if they are only options:
    the checker appends the module to run. Otherwise why not, in one line."""
    if run is None or not run.results:
        return "launch_args was not asked: its run did not start (see incident 3)"
    r = run.result
    if r.get("launch_args_error"):
        e = r["launch_args_error"]
        return f"launch_args raised {e.get('type')}: {e.get('message')} ({e.get('where', '')})"
    launch = r.get("launch_args")
    if not isinstance(launch, list) or not all(isinstance(a, str) and a.startswith("-") for a in launch):
        return f"launch_args must return a list of torchrun options (strings starting with '-'), got {launch!r}"
    banned = [a for a in launch if a.split("=")[0] in ("-m", "--module", "--no-python", "--no_python", "--run-path",
                                                       "--run_path")]
    return f"launch_args may not choose what runs ({banned[0]})" if banned else launch


# ---------------------------------------------------------------- the declarations: two checks per incident
HINT_TASKS = {1: "incident1.join", 2: "incident2.skip_step", 3: "incident3.after_step", 4: "incident4.shard_indices",
              5: "incident5.save_checkpoint", 6: "incident6.configure_network", 7: "incident7.launch_args",
              8: "incident8.train_step"}  # each incident's task for `checker hint lab4 <task>`
# Where to look and what to ask of the evidence, never the diagnosis (that is the lab).
_FIXED_HINTS = {
    1: f"{WHERE}/incident1.py join(): compare the launch environment each rank logs first with the process group "
       "join() creates from it: where does each value the group is given come from?",
    2: f"{WHERE}/incident2.py skip_step(): where is each rank when the job stalls (the log holds every rank's "
       "stack), and at which step? Your fix must hold whichever rank and step hit the bad batch.",
    3: f"{WHERE}/incident3.py after_step(): read the per-rank 'rank times' lines: who is busy outside train_step, "
       "doing what, and how often? The dashboard still needs a validation loss every job.eval_every steps.",
    4: f"{WHERE}/incident4.py shard_indices(): read each rank's 'samples this epoch' line and the last step each "
       "rank reached: do the ranks agree, for every n and world size?",
    5: f"{WHERE}/incident5.py save/load_checkpoint(): read the line logged right after the resume and compare the "
       "resumed losses with the uninterrupted run's: what does the next step read that the checkpoint may not hold?",
    6: f"{WHERE}/incident6.py configure_network(): read the first error each rank prints at start-up: what does it "
       "name, and where does that name come from? The checker moves the name the cluster exports.",
    7: f"{WHERE}/incident7.py launch_args(): read the second job's first error: what do two jobs started with these "
       "options both ask the node for?",
    8: f"{WHERE}/incident8.py train_step(): read what the job measures before it trains, then count the "
       "all-reduces one optimizer step issues and what each costs at that rate.",
}
_FIXED_WHAT = {3: ", eval cost amortised", 5: ", resume bit-identical", 6: ", gloo's interface set",
               7: ", two jobs at once", 8: ", one gradient all-reduce per step, .grad the mean gradient"}
# A resume that found the checkpoint the kill left half-written (the job saves twice; the kill lands in the second)
_TORN_HINT = ((TORN, "The checkpoint on disk is half-written: the job was killed while writing it, and the file it "
                     "wrote in place is all a resume finds. Write each file to a temporary name in the same folder and "
                     "rename it over the old one once complete (ckpt.atomic_save does both), the main file last: a "
                     "kill then leaves the previous checkpoint whole (checker hint lab4 incident5.save_checkpoint)."),)
# The pristine starter runs (it is the faulty job): its checks fail on what the checker measures, never on a TODO.
for _n in INCIDENTS:
    check(f"fixed_incident{_n}", f"incident {_n}'s job, your code, under its conditions: completes within budget, "
          "ranks in sync, loss falls" + _FIXED_WHAT.get(_n, ""),
          f"{_FIXED_HINTS[_n]} (checker hint lab4 {HINT_TASKS[_n]})",
          starter_runs=True, needs=COURSE, symptoms=_TORN_HINT if _n == 5 else ())(fixed)
    check(f"diagnosed_incident{_n}", f"diagnosis.toml [incident{_n}]: cause from the README's list; evidence occurs "
          "in the checker's log of the faulty job",
          f"Run `python -m labs.lab4_debugging.run {_n}`, read runs/lab4/incident{_n}.log (or the checker's "
          f"runs/lab4/evidence/), then fill [incident{_n}] in {WHERE}/diagnosis.toml (checker hint lab4 "
          f"{HINT_TASKS[_n]})",
          starter_runs=True, needs=COURSE)(diagnosed)

# Then the forensics checks, each declared on its evaluator in forensics.py.
CHECKS += forensics.CHECKS
