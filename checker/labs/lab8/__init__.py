"""Lab 8 checks: a two-node job launched as a cluster launches it, HSDP vs FSDP on a throttled inter-node link,
recovery from a lost node, async checkpoints, goodput under failures.

The two nodes are two network namespaces joined by a veth pair, tbf-shaped (lab 4's slow link,
solutions/lab4_debugging/slowlink.py), one torchrun agent in each with the learner's rendezvous options
(root); without root both agents run on this machine's loopback, and every row says so. Runs:
  nodes      4 ranks (2 nodes x 2): the learner's interface choice and layout check, then DDP, FSDP and HSDP
             for STEPS steps each; node 0's veth counters read around each strategy's steps 2..STEPS
  nodes@ref  the reference's DDP, FSDP and HSDP steps as 4 ranks on loopback (target solutions): the second
             opinion on the nodes run's losses (checker/labs/_crosscheck.py)
  elastic    the same job training HSDP with a checkpoint every 3 steps; after step KILL_AFTER the checker
             SIGKILLs node 1's workers; torchrun must restart both nodes' workers and the job must finish
             with every loss bit-identical to the `nodes` run's HSDP losses
  units      2 ranks (loopback): make_mesh at 2 x 1 and 1 x 2, check_layout under a misnumbered environment
             (units.py); the torchrun options of a 3 x 2 job are read with the 2 x 2 job's (multinode.task_plan)
  async      2 ranks (loopback): blocking vs async saves, interleaved; a checkpoint whose write the checker
             slows while training goes on (and all-reduces beside it) must still hold the step it was taken at;
             a kill during a background write (async_kill), then a fresh run (async_load) must load the previous one
  goodput_units, goodput_chaos   1 rank: the learner's goodput formulas at hidden numbers, and a job killed at
             random and restarted from its checkpoints (chaos.py)

The parent side (checks.py, plan.py) decides; the worker side (tasks.py) gathers the tasks of multinode.py (the
two-node job's ranks and the reading of its torchrun options), units.py, async_save.py and chaos.py. nodes.py starts
the two nodes' torchrun agents, as a scheduler would; goodput_report.py runs the chaos job once for the notebook.
"""
LAB = "lab8"
WORLD_SIZE = 4
WHERE = "labs/lab8_multinode"
NODES, PER_NODE = 2, 2  # the two-node job's shape
SEED, STEPS, KILL_AFTER = 21, 8, 5
LOSS_TOL = 1e-4   # fp32 AdamW, 8 steps: sharded reductions add in another order (measured ~1e-7)
RATE_MBIT = 400  # 50 MB/s: ~1.5 MB per FSDP step crosses in ~30 ms, small next to a step on a loaded CPU
