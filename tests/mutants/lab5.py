"""Lab 5's mutants: one realistic slip per TODO, and the check that must catch it.

Every check but k8s_manifests_valid needs a running Slurm (`sudo checker/slurm_local.sh up`; CI starts
one): without it those checks fail with "no Slurm here", which would count as a kill of nothing. The
mutants that need Slurm are therefore graded only where `checker.slurm.unavailable()` is None
(tests/test_mutants.py skips them elsewhere, and `python -m tests.mutants` reports them as not run).
"""
from . import Mutant

_SB, _K8S, _PTJ = "train.sbatch", "k8s/torchrun-job.yaml", "k8s/pytorchjob.yaml"
_WAIT = ('while :; do\n    wait "$step_pid"; rc=$?\n'
         '    kill -0 "$step_pid" 2>/dev/null || break   # `wait` returns early when a trapped signal arrives\ndone\n')

MUTANTS = [
    # train.sbatch: the directives and the trap
    Mutant("no_requeue", _SB, "#SBATCH --requeue\n", "", "batch_script_valid",
           "no --requeue: a preempted job is cancelled, not put back in the queue"),
    Mutant("signal_to_steps", _SB, "#SBATCH --signal=B:USR1@90", "#SBATCH --signal=USR1@90", "batch_script_valid",
           "the warning goes to the job steps, not the batch shell: the trap that requeues never runs"),
    Mutant("warned_but_not_requeued", _SB, '    scontrol requeue "$SLURM_JOB_ID"\n', "", "preempt_resume",
           "after the warning the ranks checkpoint and stop, but nobody requeues the job: it ends there"),
    # preemption.py
    Mutant("stop_decided_per_rank", "preemption.py", "        if dist.is_initialized():\n"
           "            dist.all_reduce(mine, op=dist.ReduceOp.MAX)\n", "", "preempt_resume",
           "each rank stops when its own signal arrives: ranks stop at different steps (a hang or mixed checkpoint)"),
    # restart.py
    Mutant("resume_counts_from_zero", "restart.py",
           "    return load_checkpoint(path, model, optimizer, scheduler, sampler)\n",
           "    load_checkpoint(path, model, optimizer, scheduler, sampler)\n    return 0\n", "preempt_resume",
           "loads the checkpoint but restarts the step count at 0: the resumed run repeats steps"),
    # jobmetrics.py
    Mutant("runs_always_one", "jobmetrics.py", '        "runs": len(records),', '        "runs": 1,',
           "metrics_complete", "a requeued job's runs counted as 1: the preemptions vanish from the table"),
    Mutant("queue_wait_last_run_only", "jobmetrics.py",
           '"queue_wait_s": round(sum(_seconds(r["SubmitTime"], r["StartTime"]) for r in records), 3),',
           '"queue_wait_s": round(_seconds(last["SubmitTime"], last["StartTime"]), 3),', "metrics_complete",
           "queue wait of the last run only: the waits of the earlier runs are lost"),
    # report.py
    Mutant("efficiency_is_speedup", "report.py", '"efficiency": tps / (size / base * base_tps)})',
           '"efficiency": tps / base_tps})', "scaling_curve", "efficiency reported as the speedup (not divided by N)"),
    # k8s manifests (no Slurm needed)
    Mutant("job_not_indexed", _K8S, "  completionMode: Indexed\n", "", "k8s_manifests_valid",
           "a NonIndexed Job: pods get no JOB_COMPLETION_INDEX, so no node rank"),
    Mutant("subdomain_not_service", _K8S, "      subdomain: lab5-train\n", "      subdomain: lab5\n",
           "k8s_manifests_valid",
           "the pods' subdomain is not the headless Service: lab5-train-0.lab5-train never resolves"),
    Mutant("pytorchjob_fixed_nnodes", _PTJ,
           'rdzv="--nnodes=2 --node-rank=$RANK --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT"',
           'rdzv="--nnodes=2 --node-rank=0 --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT"',
           "k8s_manifests_valid", "every pod claims node rank 0"),
    # blind: a learner who worked lab 5 from its README, starters and the checker's output only (never checker/)
    # broke their own solution 20 ways, the Slurm checks graded the learner's way (SURVIVORS.md says why);
    # 7 passed the checks they ran. The 13 that fail:
    Mutant("log_not_appended", _SB, "#SBATCH --open-mode=append\n", "", "batch_script_valid",
           "no --open-mode=append: each run of a requeued job truncates the log of the one before", blind=True),
    Mutant("warning_too_late", _SB, "#SBATCH --signal=B:USR1@90\n", "#SBATCH --signal=B:USR1@30\n",
           "batch_script_valid", "the warning asked 30 s ahead: Slurm may deliver it up to 60 s late", blind=True),
    Mutant("trap_kills_srun", _SB, '    scancel --signal=TERM "$SLURM_JOB_ID"\n', '    kill -TERM "$step_pid"\n',
           "preempt_resume", "the trap signals srun (the step's pid): srun cancels the step and the ranks die unsaved",
           blind=True),
    Mutant("srun_in_foreground", _SB, '    -m "$module" --out "$out" ${LAB5_TRAIN_ARGS:-} &\nstep_pid=$!\n',
           '    -m "$module" --out "$out" ${LAB5_TRAIN_ARGS:-}\nstep_pid=$!\n', "preempt_resume",
           "srun in the foreground: bash runs the USR1 trap only after srun has exited, so the warning is never "
           "passed on", blind=True),
    Mutant("resume_next_step", "restart.py",
           "    return load_checkpoint(path, model, optimizer, scheduler, sampler)\n",
           "    return load_checkpoint(path, model, optimizer, scheduler, sampler) + 1\n", "preempt_resume",
           "resume returns the step after the checkpoint's: train.py starts one further and a step is skipped",
           blind=True),
    Mutant("elapsed_last_run_only", "jobmetrics.py",
           '"elapsed_s": round(sum(_seconds(r["StartTime"], r["EndTime"]) for r in records), 3),',
           '"elapsed_s": round(_seconds(last["StartTime"], last["EndTime"]), 3),', "metrics_complete",
           "run time of the last run only: the runs before each requeue are lost", blind=True),
    Mutant("state_of_first_run", "jobmetrics.py", '        "state": last["JobState"],\n',
           '        "state": records[0]["JobState"],\n', "metrics_complete",
           "the state of the first run: a requeued job reads PENDING though it completed", blind=True),
    Mutant("rate_of_last_step", "jobmetrics.py",
           '        "tokens_per_s": round(tokens_per_s(steps), 1) if steps else "",\n',
           '        "tokens_per_s": round(steps[-1]["tokens"] / steps[-1]["step_s"], 1) if steps else "",\n',
           "metrics_complete", "tokens/s of the last step alone, not the median over steps", blind=True),
    Mutant("jobcomp_split_every_equals", "jobmetrics.py",
           '            records.append(dict(item.partition("=")[::2] for item in line.split()))\n',
           '            records.append(dict(item.split("=") for item in line.split()))\n', "metrics_complete",
           "each item split at every '=': a value that contains one breaks the line", blind=True),
    Mutant("array_one_task_too_many", "sweep.py", 'f"--array=0-{len(world_sizes) - 1}%1"',
           'f"--array=0-{len(world_sizes)}%1"', "metrics_complete",
           "the array's range counted as if exclusive: one task more than there are world sizes", blind=True),
    Mutant("efficiency_inverted", "report.py", '"efficiency": tps / (size / base * base_tps)})',
           '"efficiency": (size / base * base_tps) / tps})', "scaling_curve",
           "efficiency as ideal over measured: above 1 exactly when scaling falls short", blind=True),
    Mutant("k8s_pods_one_at_a_time", _K8S, "  parallelism: 2\n", "  parallelism: 1\n", "k8s_manifests_valid",
           "parallelism 1: node 1's pod starts only after node 0's ends, and the rendezvous never fills", blind=True),
    Mutant("k8s_master_not_via_service", _K8S, "--master-addr=lab5-train-0.lab5-train --master-port",
           "--master-addr=lab5-train-0 --master-port", "k8s_manifests_valid",
           "node 0 named by its bare hostname: only the headless Service's subdomain makes it resolvable from the "
           "other pod", blind=True),
    # a blind survivor made a check: PreemptionFlag graded on 2 ranks with only one signalled
    Mutant("stop_when_all_agree", "preemption.py", "            dist.all_reduce(mine, op=dist.ReduceOp.MAX)\n",
           "            dist.all_reduce(mine, op=dist.ReduceOp.MIN)\n", "preempt_resume",
           "MIN where MAX was needed: the ranks stop only once every one of them has been signalled", blind=True),
    # blind survivors made checks (SURVIVORS.md, lab 5: caught since)
    Mutant("k8s_grace_shorter_than_shutdown", _K8S, "      terminationGracePeriodSeconds: 90\n",
           "      terminationGracePeriodSeconds: 30\n", "k8s_manifests_valid",
           "30 s between SIGTERM and SIGKILL: less than torchrun's 80 s shutdown timeout, the save is cut off",
           blind=True),
    Mutant("world_size_not_checked", "restart.py", "    if saved != dist.get_world_size():\n",
           "    if saved != saved:\n", "preempt_resume",
           "a checkpoint written at another world size is loaded, not refused", blind=True),
    Mutant("array_tasks_concurrent", "sweep.py", 'f"--array=0-{len(world_sizes) - 1}%1"',
           'f"--array=0-{len(world_sizes) - 1}"', "scaling_curve",
           "no %1: the sweep's tasks may run at once and compete for the cores they are measured on", blind=True),
    Mutant("single_wait", _SB, _WAIT, 'wait "$step_pid"; rc=$?\n', "preempt_resume",
           "one `wait`: it returns as soon as the trap has run, and the job requeues itself while the ranks still save",
           blind=True),
    Mutant("fixed_master_port", _SB,
           "master_port=$(\"$python\" -c 'from checker.spawn import free_port; print(free_port())')\n",
           "master_port=29500\n", "preempt_resume",
           "the rendezvous port hard-coded to 29500: two jobs on one node (or a port still held) clash", blind=True),
]

NEEDS_SLURM = {"batch_script_valid", "preempt_resume", "metrics_complete", "scaling_curve"}


def unavailable(m: Mutant) -> str | None:
    """Why this mutant cannot be graded here (None: it can)."""
    if m.check not in NEEDS_SLURM:
        return None
    from checker import slurm
    return slurm.unavailable()
