"""Lab 4's parent side: the runs a grade starts (the learner's jobs under each incident's conditions, the faulty jobs
whose logs a diagnosis quotes, the forensics evidence and the learner's analysers on it), and what the checks read
beside them (checks.Facts)."""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from checker import seams
from checker.harness import REPO_ROOT
from checker.labs._common import Check, run_info
from checker.labs.lab4 import INCIDENTS, LAB, WORLD_SIZE  # noqa: F401  (WORLD_SIZE: the parent side's)
from checker.labs.lab4.checks import CHECKS, Facts, checked_launch, needs_log, read_diagnosis  # noqa: F401  (CHECKS)
from checker.labs.lab4.course import course_module, scenarios
from checker.labs.lab4.evidence import faulty_specs, keep_faulty_logs

GRADE_SECONDS = 60         # ~12 two-rank jobs of yours, the faulty jobs' logs already kept (runs/lab4/evidence/)
FIRST_GRADE_SECONDS = 150  # the first grade of a course version also runs the ~11 faulty torchruns (CI: 100-124 s)
# The process-group timeout of your jobs in the grade (Job.timeout_s, lower where the incident's own is): a step of
# the tiny model takes milliseconds and every collective of a working job finds its peer within one, so a rank
# that waits 10 s is waiting for a collective its peer never calls (the reference passes at a load of 15 on 2 cores).
# With the job's default (30 s) a rank of yours skipping a collective cost each of the grade's 10 jobs 30 s, 3 jobs
# at a time: measured, one job 34 s to FAIL, now 16 s.
FIXED_TIMEOUT_S = 10.0


def grade(h, checks: list[Check]) -> tuple[list, list]:
    sc = scenarios()
    v = h.variant
    names = {c.name for c in checks}
    fixed = {n for n in INCIDENTS if f"fixed_incident{n}" in names}
    diagnosis = read_diagnosis(h.root / h.target / seams.SEAMS[LAB].folder / "diagnosis.toml")
    # Only a diagnosis that names the right cause needs the faulty job's log to check its evidence against.
    diagnosed = {n for n in INCIDENTS if f"diagnosed_incident{n}" in names and needs_log(n, diagnosis)}

    # A collective that waits longer than this for its peer is a hang (scaled as the run budgets are)
    wait_s = FIXED_TIMEOUT_S * float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))

    def job(n, **over):
        s = sc.scenario(n, v).job
        return {**s, "timeout_s": min(s.get("timeout_s", wait_s), wait_s), **over}

    def job_spec(n, name=None, parts=(), **over):
        s = sc.scenario(n, v)
        # s.env (SLURM_NTASKS, COURSE_IFNAME) is read by the job's code: a fork of the run server carries it,
        # where a fresh start costs each job two imports of torch (incidents 1 and 6: 20-40 s on 2 loaded cores)
        return dict(name=name or f"fixed{n}", task="job", nproc=s.nproc, budget_s=60, env=s.env, env_read_late=True,
                    args=dict(job=job(n, **over), parts=list(parts)))

    ckpt = str(h.workdir / "incident5.ckpt.pt")
    (h.workdir / "after").mkdir(exist_ok=True)  # the second killed job's checkpoint, in a folder of its own
    ckpt_after = str(h.workdir / "after" / "incident5.ckpt.pt")
    side = {4: ["shards"], 3: ["launch_args"] if 7 in fixed else [], 8: ["accum"]}
    phase1 = [job_spec(n, parts=side.get(n, ())) for n in sorted(fixed) if n not in (5, 7)]
    if 7 in fixed and 3 not in fixed:
        phase1.append(job_spec(3, parts=["launch_args"]))
    if 5 in fixed:
        phase1 += [job_spec(5, "fixed5_full", save_at=None),
                   dict(job_spec(5, "fixed5_preempted", ckpt=ckpt), kill_on="saved",
                        args=dict(job=job(5, ckpt=ckpt, save_every=2), on_saved_cue=True,
                                  parts=[])),
                   # the other kill point: the weights' file complete, the kill inside the save's next write
                   dict(job_spec(5, "fixed5_after", ckpt=ckpt_after), kill_on="saved_after",
                        args=dict(job=job(5, ckpt=ckpt_after, save_every=2), on_saved_cue=True, after_weights=True,
                                  parts=[]))]
    desync = course_module("desync") if "desync_found" in names else None
    # The course's faulty jobs run as the reference's runs do (target solutions): they import no learner code, and
    # the learner's runs never see solutions/ (checker/reach.py).
    if desync:  # the faulty jobs of forensics.py: one per kind, at this grade's variant, all their dumps kept here
        for kind in desync.KINDS:
            c = desync.case(kind, v)
            # a rank descheduled longer than the timeout in the job's healthy part would spoil the evidence
            c.timeout_s *= float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))
            phase1.append(dict(name=f"desync_{kind}", task="desync", target="solutions", nproc=desync.WORLD,
                               budget_s=60, args=dict(case=vars(c), out=str(h.workdir / "dumps" / kind))))
    link = course_module("linkprobe") if "slow_rank_found" in names else None
    slow_at = link.rates(v) if link else None
    if link:
        phase1.append(dict(name="linkprobe", task="linkprobe", target="solutions", nproc=link.WORLD, budget_s=60,
                           args=dict(out=str(h.workdir / "link"), slow_rank=slow_at[0], rate_gbps=slow_at[1])))
    memleak = course_module("memleak") if "memory_leak_found" in names else None
    if memleak:  # the leaking loop, every kind at this grade's variant, in a process of its own
        phase1.append(dict(name="memleak", task="memleak", target="solutions", budget_s=60,
                           args=dict(cases=[vars(memleak.case(k, v)) for k in memleak.KINDS],
                                     out=str(h.workdir / "memory"))))
    real = course_module("linkprobe") if "slow_rank_found_netns" in names else None
    real_at = real.netns_rates(v) if real else None
    if real:  # it makes namespaces: the host's privileges, not the grade's sandbox (as lab 8's link)
        phase1.append(dict(name="linkprobe_netns", task="", budget_s=90, sandbox=False,
                           env={"PYTHONPATH": str(REPO_ROOT)},
                           argv=[sys.executable, "-m", "solutions.lab4_debugging.linkprobe", "--slow-rank",
                                 str(real_at[0]), "--netns-rate-mbit", str(real_at[1]),
                                 "--out", str(h.workdir / "reallink")]))
    # Evidence is checked against the faulty job as the learner ran it (the public variant): a hidden variant
    # renames the interface or moves the NaN to another rank, and the error a learner quoted would change with it.
    logs, faulty, folder, key = faulty_specs(h, 0, diagnosed) if diagnosed else ({}, [], None, "")
    # Three at a time on 2 cores: the faulty jobs spend most of their time waiting for a timeout.
    runs = h.run_many(faulty + phase1, parallel=3)
    if faulty:
        keep_faulty_logs(h, logs, faulty, folder, key)
    phase2 = [job_spec(5, "fixed5_resumed", ckpt=ckpt, save_at=None, resume=True),
              job_spec(5, "fixed5_after_resumed", ckpt=ckpt_after, save_at=None, resume=True)] if 5 in fixed else []
    launch = checked_launch(runs.get("fixed3")) if 7 in fixed else None
    busy = None
    if isinstance(launch, list):
        busy = _hold(sc.BUSY_PORT)  # "another job" holds torchrun's default port, as on a shared node
        # The two jobs and the port's holder must share one network, as jobs on one node do: in a sandbox of
        # its own each job would have a loopback to itself, and no launch could ever clash.
        phase2 += [{**job_spec(7, f"fixed7_job{j}"), "launch": launch, "sandbox": False} for j in range(2)]
    if desync or link or real or memleak:  # the learner's analysers, in one process, on the evidence produced
        dumps = {k: [str(h.workdir / "dumps" / k / f"rank{r}") for r in range(desync.WORLD)]
                 for k in (desync.KINDS if desync else ())}
        dumps = {k: p for k, p in dumps.items() if all(Path(x).exists() for x in p)}
        traces = [str(h.workdir / "link" / f"trace_rank{r}.json") for r in range(link.WORLD)] if link else []
        traces = traces if all(Path(t).exists() for t in traces) else []
        netns = [str(h.workdir / "reallink" / f"trace_rank{r}.json") for r in range(real.WORLD)] if real else []
        netns = netns if all(Path(t).exists() for t in netns) else []
        snapshots = {"source": memleak.__file__, "paths": {  # source: the file as the snapshots' frames name it
            k: str(h.workdir / "memory" / f"{k}.pickle") for k in memleak.KINDS
            if (h.workdir / "memory" / f"{k}.pickle").exists()}} if memleak else None
        phase2.append(dict(name="forensics", task="forensics", budget_s=60,
                           args=dict(cases=dumps, traces=traces, netns_traces=netns, snapshots=snapshots)))
    try:
        runs.update(h.run_many(phase2, parallel=3))
    finally:
        if busy is not None:
            busy.close()
    facts = Facts(logs=logs, diagnosis=diagnosis, scenario=sc.scenario, variant=v, launch=launch,
                  desync_kinds=desync.KINDS if desync else (), slow_link=slow_at, netns_link=real_at)
    return [c.evaluate(c, runs, facts) for c in checks], info(runs, logs)


def info(runs, logs) -> list[tuple[str, str]]:
    rows = run_info(runs)
    if logs:
        rows.append(("faulty jobs' logs", "runs/lab4/evidence/ (the lines your diagnosis must quote come from these)"))
    return rows


def _hold(port: int):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
    except OSError:
        pass  # something on this machine holds it already: the same condition
    return s
