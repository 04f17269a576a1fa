"""Lab 5's mutants: one realistic slip per TODO, and the check that must catch it.

Every check but k8s_manifests_valid needs a running Slurm (`sudo checker/slurm_local.sh up`; CI starts
one): without it those checks fail with "no Slurm here", which would count as a kill of nothing. The
mutants that need Slurm are therefore graded only where `checker.slurm.unavailable()` is None
(tests/test_mutants.py skips them elsewhere, and `python -m tests.mutants` reports them as not run).
"""
from . import Mutant

_SB, _K8S, _PTJ = "train.sbatch", "k8s/torchrun-job.yaml", "k8s/pytorchjob.yaml"

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
]

NEEDS_SLURM = {"batch_script_valid", "preempt_resume", "metrics_complete", "scaling_curve"}


def unavailable(m: Mutant) -> str | None:
    """Why this mutant cannot be graded here (None: it can)."""
    if m.check not in NEEDS_SLURM:
        return None
    from checker import slurm
    return slurm.unavailable()
