"""Lab 5 checks: the batch script, preemption -> requeue -> bit-identical resume, metrics, scaling curve, manifests.

Everything runs on a real Slurm. The checker (plan.py) submits the learner's batch script itself, preempts
that job twice (the warning the script must handle, then a plain `scontrol requeue`), and runs the
learner's sweep; the jobs queue one after another on the node, so the sweep runs while the
preempted job waits to be requeued. Its preemption saves are slowed (SAVE_DELAY_S), so a script that requeues
before its step has ended shows in the records, and run 1's rendezvous port is held while the job waits
(port.py), so a fixed port shows too. The learner's collect/report code then runs in a worker (tasks.py), and
every number it writes is checked (checks.py) against the checker's own reading of the jobcomp records and
step logs. No Slurm: every check that needs it is NOT RUN, with how to start one (never a pass). The Kubernetes
manifests are checked offline, with or without Slurm (k8s.py).
"""
LAB = "lab5"
WORLD_SIZE = 2          # ranks per training job (the sweep also runs 1)
WHERE = "labs/lab5_scheduler"

# The jobs the checker submits
STEPS = 40          # steps of every training job (preempted, reference, sweep)
DEADLINE_S = 150    # a job still queued or running after this is cancelled
SWEEP = [1, 2]
TRAIN_ARGS = f"--steps {STEPS} --ckpt-every 10"
# The preempted job idles 50 ms a step (sleeping changes no number), so the checker's two interruptions
# land mid-run: at step WARN_AT of run 1 and WARN_AT steps into run 2. Its preemption save takes SAVE_DELAY_S more
# (as a larger model's would), so a batch shell that requeues the job before its step has ended does it visibly
# before the ranks' checkpoint is written (checks._requeued_before_saved); tiny's ~10 ms save would be done
# within the same second.
SAVE_DELAY_S = 3
PREEMPT_ARGS = f"{TRAIN_ARGS} --step-sleep 0.05 --save-delay {SAVE_DELAY_S}"
WARN_AT = 8
