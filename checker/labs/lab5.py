"""Lab 5 checks: the batch script, preemption -> requeue -> bit-identical resume, metrics, scaling curve, manifests.

Everything runs on a real Slurm. The checker submits the learner's batch script itself, preempts
that job twice (the warning the script must handle, then a plain `scontrol requeue`), and runs the
learner's sweep; the jobs queue one after another on the node, so the sweep runs while the
preempted job waits to be requeued. Its preemption saves are slowed (SAVE_DELAY_S), so a script that requeues
before its step has ended shows in the records, and run 1's rendezvous port is held while the job waits
(lab5_port.py), so a fixed port shows too. The learner's collect/report code then runs in a worker, and
every number it writes is checked against the checker's own reading of the jobcomp records and
step logs. No Slurm: every check that needs it is NOT RUN, with how to start one (never a pass).
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from checker import seams, slurm
from checker.labs import lab5_port, lab5_refuse
from checker.labs._common import Check, probe
from checker.labs.lab5_eval import (
    DEADLINE_S,
    LAB,
    STEPS,
    check_flag,
    check_manifests,
    check_metrics,
    check_preempt,
    check_refusal,
    check_scaling,
    read_events,
    scaling_info,
    steps_of_run,
    todo_prefix,
)
from checker.labs.lab5_stall import Stall
from checker.report import CheckResult

WORLD_SIZE = 2          # ranks per training job (the sweep also runs 1)
SWEEP = [1, 2]
TRAIN_ARGS = f"--steps {STEPS} --ckpt-every 10"
# The preempted job idles 50 ms a step (sleeping changes no number), so the checker's two interruptions
# land mid-run: at step WARN_AT of run 1 and WARN_AT steps into run 2. Its preemption save takes SAVE_DELAY_S more
# (as a larger model's would), so a batch shell that requeues the job before its step has ended does it visibly
# before the ranks' checkpoint is written (lab5_eval._requeued_before_saved); tiny's ~10 ms save would be done
# within the same second.
SAVE_DELAY_S = 3
PREEMPT_ARGS = f"{TRAIN_ARGS} --step-sleep 0.05 --save-delay {SAVE_DELAY_S}"
WARN_AT = 8
GRADE_SECONDS = 120  # two requeue round trips (~7 s each on slurm_local.sh's settings) and four jobs in one queue
WHERE = "labs/lab5_scheduler"
MIN_SIGNAL_LEAD_S = 60  # a warning must leave time to checkpoint: Slurm may deliver it up to 60 s late

CHECKS = [
    Check("batch_script_valid", "train.sbatch passes `sbatch --test-only` and asks for --requeue, "
          "--open-mode=append and --signal=B:USR1@N (N >= 60)",
          f"{WHERE}/train.sbatch: Slurm takes a job's preemption policy from the header, at submission: may the job "
          "be requeued, does a second run append to the log or overwrite it, and which process is warned, how early "
          "(Slurm may be 60 s late)? #SBATCH lines after the first command are plain comments. "
          "(checker hint lab5 train.sbatch.1)",
          needs=("slurm",)),
    Check("preempt_resume", f"the checker preempts your job twice ({WARN_AT} steps into each run: USR1 to the "
          "batch shell, then `scontrol requeue`); it completes with losses bit-identical to an uninterrupted run",
          "Read the job's Slurm log run by run (its tail: grade -v). No checkpoint or requeue after the warning: "
          "who got the signal, and did the batch shell wait for the ranks to save before requeueing "
          f"({WHERE}/train.sbatch)? A hang or mixed steps: the ranks must agree on the step they stop at "
          f"({WHERE}/preemption.py). Losses differ after the resume: what run 2 loads and the step it continues "
          f"from ({WHERE}/restart.py). (checker hint lab5 train.sbatch.3)",
          needs=("slurm",)),
    Check("metrics_complete", "collect() + write_csv(): one row per job with state, runs, queue wait, elapsed, "
          "tokens/s, each equal to the checker's reading of the jobcomp records and step logs",
          f"{WHERE}/jobmetrics.py: a requeued job leaves one jobcomp line per run (JobState=PENDING, then the final "
          "state), and each requeue resets SubmitTime: a job's runs, wait and run time span all its lines, not the "
          "last. Compare the wrong cells with the jobcomp file. (checker hint lab5 jobmetrics.job_row)",
          needs=("slurm",)),
    Check("scaling_curve", f"scaling_table() + write_report() from the sweep's real jobs at world sizes {SWEEP}: "
          "speedup and efficiency equal tokens/s(N) / (N x tokens/s(1)); a PNG plot and a markdown table",
          f"{WHERE}/report.py: weak scaling, so N ranks process N times the tokens; efficiency is the measured "
          "tokens/s over the ideal, which is linear from the smallest world size measured, and only COMPLETED jobs "
          "that logged a rate are measurements. (checker hint lab5 report.scaling_table)",
          needs=("slurm",)),
    Check("k8s_manifests_valid", "k8s/*.yaml: an Indexed Job + headless Service running torchrun, and a Kubeflow "
          "PyTorchJob, valid against the pinned Kubernetes schema and consistent with each other",
          f"{WHERE}/k8s/: each problem listed names a field; ask what train.sbatch does there (k8s/README.md maps "
          "every field to it): how many nodes and at once, each node's rank, a rendezvous host known in advance, "
          "what counts as a failure, the time between the polite signal and the kill. "
          "(checker hint lab5 torchrun-job.yaml.1)"),
]


# ---------------------------------------------------------------- worker side (learner code runs only here)
def task_probe(ctx, target):
    return probe(LAB, target)


def task_sweep(ctx, target, runs, train_args, world_sizes):
    seam = seams.load(LAB, target)
    return {"array": str(seam.submit_sweep(world_sizes, runs, train_args))}


def task_collect(ctx, target, jobcomp, runs, csv_path):
    seam = seams.load(LAB, target)
    rows = seam.collect(jobcomp, runs)
    seam.write_csv(rows, csv_path)
    return {"csv": csv_path}


def task_report(ctx, target, csv_path, out):
    import csv

    seam = seams.load(LAB, target)
    with open(csv_path, newline="") as f:
        table = seam.scaling_table(list(csv.DictReader(f)))
    png, md = seam.write_report(csv_path, out)
    return {"table": [{k: (v if k != "jobs" else list(map(str, v))) for k, v in t.items()} for t in table],
            "png": str(png), "md": str(md)}


def task_flag(ctx, target, signal_at):
    """PreemptionFlag on 2 ranks where only rank 1 is signalled (SIGTERM to itself before step signal_at), as one
    node of a job may hear the warning before another: should_stop, called by both at every step, must say True on
    both from that step on. Per rank it would stop one rank and leave the other in its next collective.
    Then, on the same 2 ranks, resume's refusal of a checkpoint from another world size (lab5_refuse.py)."""
    import os
    import signal
    import time

    from labs.common import dist as cdist

    env = cdist.init(timeout_s=20)
    seam = seams.load(LAB, target)
    flag = seam.PreemptionFlag()
    flag.install()
    said = []
    for step in range(signal_at + 3):
        if step == signal_at and env.rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler has run before this step's should_stop
        said.append(bool(flag.should_stop(env.device)))
    refusal, err = ctx.attempt(lambda: lab5_refuse.save_then_resume_alone(ctx, seam, target, env))
    cdist.teardown()  # (a no-op once the refusal has torn the group down)
    return {"rank": env.rank, "said": said, "refusal": {"raised_outside": err} if err else refusal}


TASKS = {"probe": task_probe, "sweep": task_sweep, "collect": task_collect, "report": task_report, "flag": task_flag}


# ---------------------------------------------------------------- checker side
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


def preempt(job: str, log: Path, deadline: float, notes: list[str], warn_at: int = WARN_AT, stall=None,
            hold=None) -> None:
    """Interrupt run 1 with the warning, run 2 with a plain requeue; note what was done. With a PortHold, take run
    1's rendezvous port while the job waits to be requeued (lab5_port.py)."""
    port = None
    for restart, action in ((0, "warning"), (1, "requeue")):
        while time.monotonic() < deadline:
            done = steps_of_run(log, restart)
            if done >= warn_at:
                break
            if restart == 1 and port and hold.port is None and not done \
                    and slurm.states([job]) == {job: "PENDING"} and hold.take(port):  # until run 2 has stepped
                notes.append(f"port {port}, run 1's rendezvous port, held by the checker from "
                             f"{time.strftime('%H:%M:%S')} (as another job or a lingering process may hold it)")
            if not slurm.queued([job]):
                notes.append(f"the job ended before its run {restart + 1} reached {warn_at} steps")
                return
            if stall is not None and stall.poll():
                return
            time.sleep(0.1)
        else:
            return
        if action == "warning" and hold is not None:
            port = lab5_port.rendezvous_port(job)
        err = slurm.signal_batch(job) if action == "warning" else slurm.requeue(job)
        notes.append(f"{action} sent to run {restart + 1} at {time.strftime('%H:%M:%S')}"
                     + (f" ({err})" if err else ""))
        if err:
            return


def grade(h, checks):
    names = {c.name for c in checks}
    script = h.root / h.target / seams.SEAMS[LAB].folder / "train.sbatch"
    results: dict[str, CheckResult] = {}
    info: list[tuple[str, str]] = []
    byname = {c.name: c for c in checks}

    def fail(name, msg, value=None, threshold=None, unit="", details=""):
        results[name] = CheckResult(name, False, value, threshold, unit, msg, byname[name].hint, details)

    if "k8s_manifests_valid" in names:
        results["k8s_manifests_valid"] = check_manifests(byname["k8s_manifests_valid"], h)
    slurm_names = names - {"k8s_manifests_valid"}  # without Slurm, checker/cli.py has set them aside (NOT RUN)
    if not slurm_names:
        return [results[c.name] for c in checks], info
    if not script.exists():
        for n in slurm_names:
            fail(n, f"{script.relative_to(h.root)} not found")
        return [results[c.name] for c in checks], info

    runs = h.workdir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    env = slurm.client_env({"LAB5_RUNS": str(runs), "LAB5_PYTHON": sys.executable, "COURSE_TARGET": h.target,
                            "PYTHONPATH": str(h.root), "COURSE_DEVICE": h.device})
    if "batch_script_valid" in names:
        ok, said = slurm.test_only(script, env)
        problems = ([] if ok else [f"sbatch --test-only: {said}"]) + script_problems(script.read_text())
        results["batch_script_valid"] = CheckResult(
            "batch_script_valid", not problems, len(problems), 0, "problems",
            todo_prefix([script]) + "; ".join(problems)
            or f"sbatch --test-only: {said.splitlines()[-1] if said else 'ok'}",
            byname["batch_script_valid"].hint if problems else "")

    needs_jobs = names & {"preempt_resume", "metrics_complete", "scaling_curve"}
    if not needs_jobs:
        return [results[c.name] for c in checks], info
    signal_at = 2 + h.variant % 3  # a hidden variant moves it
    flag = h.run("flag", "flag", dict(signal_at=signal_at), budget_s=60, nproc=2) if "preempt_resume" in names else None
    deadline = time.monotonic() + DEADLINE_S * float(
        os.environ.get("CHECKER_BUDGET_SCALE", "1"))  # a site's slow requeue
    # --chdir: the job starts `python -m` there, which puts that folder first on its path: the graded tree's labs/
    job, said = slurm.sbatch(script, ["--job-name=checker-lab5-preempt", f"--output={runs}/slurm-%j.log",
                                      f"--chdir={h.root}"],
                             {**env, "LAB5_TRAIN_ARGS": PREEMPT_ARGS})
    # submit_sweep calls sbatch, which must reach slurmctld on this machine's network: not from a sandbox's loopback
    sweep = h.run("sweep", "sweep", dict(runs=str(runs), train_args=TRAIN_ARGS, world_sizes=SWEEP), budget_s=30,
                  sandbox=False)
    array = sweep.result.get("array") if not sweep.error() else None
    throttle = slurm.array_throttle(array) if array else None  # read now: the controller forgets it MinJobAge after
    submitted = [j for j in (job, array) if j]
    notes: list[str] = []
    stall = Stall(runs, submitted)  # a job that runs but writes nothing ends the wait (lab5_stall.py)
    hold = lab5_port.PortHold()
    try:
        if job:
            h.on_progress("preempted job")
            preempt(job, runs / job / "log.jsonl", deadline, notes,
                    WARN_AT + h.variant % 5, stall, hold)  # a hidden variant moves the step
        h.on_progress("jobs")
        left = slurm.wait_all(submitted, deadline, stop=stall.poll)
    finally:
        slurm.cancel(submitted)  # anything still queued at the deadline: no job outlives the grade
        hold.close()
    records = slurm.jobcomp_records()
    tasks = slurm.array_tasks(array) if array else []
    if stall.why:
        notes.append(stall.why)
    info += [("preemption", "; ".join(notes) or "-"),
             ("jobs", f"preempted {job or '-'}; sweep array {array or '-'}: tasks {', '.join(tasks) or '-'}")]

    ref = _sweep_job(tasks, runs, 2)
    if "preempt_resume" in names:
        results["preempt_resume"] = check_preempt(byname["preempt_resume"], job, said, runs, ref, records, left, notes,
                                                  stall.why)
        if results["preempt_resume"].passed and (wrong := check_flag(flag, signal_at) or check_refusal(flag)):
            fail("preempt_resume", wrong, unit="max |loss diff|")
    if names & {"metrics_complete", "scaling_curve"}:
        finished = [j for j in ([job] if job else []) + tasks if slurm.finished(j, records)]
        csv_path = runs / "metrics.csv"
        col = h.run("collect", "collect", dict(jobcomp=str(slurm.jobcomp_path()), runs=str(runs),
                                               csv_path=str(csv_path)), budget_s=30)
        if "metrics_complete" in names:
            results["metrics_complete"] = check_metrics(byname["metrics_complete"], col, csv_path, finished, runs,
                                                        records, sweep, array, stall.why)
        if "scaling_curve" in names:
            if col.error():
                c = byname["scaling_curve"]
                err = col.error()
                results["scaling_curve"] = CheckResult(c.name, False, message="needs metrics_complete's CSV first: " + (
                    f"not written yet: {err['todo']}" if err.get("todo")
                    else f"{err['type']}: {err.get('message', '')}"),
                    hint=c.hint)
            else:
                rep = h.run("report", "report", dict(csv_path=str(csv_path), out=str(runs / "report")), budget_s=60)
                results["scaling_curve"] = check_scaling(byname["scaling_curve"], rep, finished, runs, records,
                                                         (array, throttle))
                info += scaling_info(rep)
    return [results[c.name] for c in checks], info


def _sweep_job(tasks, runs, world_size):
    for t in tasks:
        events, _ = read_events(runs / t / "log.jsonl")
        if any(e.get("event") == "start" and e.get("world_size") == world_size for e in events):
            return t
    return None
