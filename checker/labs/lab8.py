"""Lab 8 checks: a two-node job launched as a cluster launches it, HSDP vs FSDP on a throttled inter-node link,
recovery from a lost node, async checkpoints.

The two nodes are two network namespaces joined by a veth pair, tbf-shaped (lab 4's slow link,
solutions/lab4_debugging/slowlink.py), one torchrun agent in each with the learner's rendezvous options
(root); without root both agents run on this machine's loopback, and every row says so. Runs:
  nodes      4 ranks (2 nodes x 2): the learner's interface choice and layout check, then DDP, FSDP and HSDP
             for STEPS steps each; node 0's veth counters read around each strategy's steps 2..STEPS
  elastic    the same job training HSDP with a checkpoint every 3 steps; after step KILL_AFTER the checker
             SIGKILLs node 1's workers; torchrun must restart both nodes' workers and the job must finish
             with every loss bit-identical to the `nodes` run's HSDP losses
  units      2 ranks (loopback): make_mesh at 2 x 1 and 1 x 2, check_layout under a misnumbered environment
             (lab8_units.py); the torchrun options of a 3 x 2 job are read with the 2 x 2 job's (lab8_tasks.task_plan)
  async      2 ranks (loopback): blocking vs async saves, interleaved; a checkpoint whose write the checker
             slows while training goes on (and all-reduces beside it) must still hold the step it was taken at;
             a kill during a background write (async_kill), then a fresh run (async_load) must load the previous one
"""
from __future__ import annotations

import json
import subprocess
import sys

from checker.labs import lab8_async, lab8_chaos, lab8_tasks, lab8_units
from checker.labs._common import Check, probe

LAB = "lab8"
WORLD_SIZE = 4
GRADE_SECONDS = 120  # two 4-rank torchrun jobs (one restarts its workers), two 2-rank runs, the chaos job (~40 s)
WHERE = "labs/lab8_multinode"
SEED, STEPS, KILL_AFTER = 21, 8, 5
RATE_MBIT = 400  # 50 MB/s: ~1.5 MB per FSDP step crosses in ~30 ms, small next to a step on a loaded CPU

# Every node check starts with the learner's torchrun options: when those cannot make the job (checked with
# torchrun's own parser, lab8_tasks.launch_problem) or the agents never meet, that is the hint, whatever the check.
LAUNCH = ((r"torchrun_args\([^)]*node_rank=|NoRendezvous|no rendezvous",
           f"The job never started: every node check runs under your torchrun options ({WHERE}/launch.py), and the "
           "message says which one cannot make a 2-node job or why the agents never met (checker hint lab8 "
           "launch.torchrun_args)"),)

CHECKS = [
    Check("multinode_launch", "2 nodes x 2 ranks under your torchrun options (c10d rendezvous): every rank sees "
          "world 4 laid out node by node, your check_layout agrees (and raises on 2 ranks numbered against the "
          "nodes), gloo bound to the interface that reaches node 0 (the veth in each namespace); your options "
          "also make a 3 x 2 job and declare a silent node dead within 3 s",
          f"The job did not come up as 2 nodes x 2 ranks on the right interface ({WHERE}/launch.py); the message "
          "says which: gloo bound where the other node cannot reach it (checker hint lab8 launch.pick_interface), "
          "or a rendezvous that never completes or numbers ranks otherwise: the endpoint, the address each node "
          "advertises, the job's size (checker hint lab8 launch.torchrun_args)", symptoms=LAUNCH),
    Check("hsdp_equivalence", f"DDP, flat FSDP (1 x 4) and your HSDP (2 x 2 mesh), {STEPS} AdamW steps from the "
          "same weights and data: FSDP's and HSDP's losses equal DDP's; your make_mesh at 2 x 1 and 1 x 2 "
          "holds one node per row, dims named (replicate, shard)",
          f"FSDP and HSDP compute DDP's step, only sharded ({WHERE}/hsdp.py): losses that differ mean the mesh "
          "does not hold every rank once, one node per row (checker hint lab8 hsdp.make_mesh), or not every "
          "parameter is sharded and its gradient reduced over it (checker hint lab8 hsdp.shard_model)",
          symptoms=LAUNCH),
    Check("hsdp_internode_bytes", "bytes through the inter-node veth per step (its own counters) within 15% of "
          "3 g (N-1)/N B for FSDP and 2 (g-1) B for HSDP on gloo (B: model bytes, g nodes, N ranks); HSDP below FSDP",
          f"More bytes crossed the link than the formula ({WHERE}/hsdp.py): most likely a shard group spans the "
          "nodes (a mesh row must be one node's ranks: the transposed mesh all-gathers over the slow link), or "
          "the weights are gathered more than once per step (checker hint lab8 hsdp.make_mesh)", symptoms=LAUNCH),
    Check("elastic_recovery", f"node 1's workers killed after step {KILL_AFTER}: the job finishes, torchrun "
          "restarted the workers, and every loss is bit-identical to the uninterrupted run's",
          f"A restarted worker knows only the disk ({WHERE}/elastic.py): losses that drift after the restart "
          "mean some state did not come back (the optimizer's moments, the step); a job that starts over found "
          "no checkpoint; no restart at all means torchrun was allowed none (launch.py) "
          "(checker hint lab8 elastic.resume)", symptoms=LAUNCH),
    Check("async_checkpoint", "an async save takes at least half of the held file write off training's path "
          "(blocking minus async stall, medians of 3 interleaved); a "
          "checkpoint holds the step it was taken at though training goes on during its write (its threads held "
          "until training stepped) and all-reduces beside it; a kill mid-write leaves the previous checkpoint "
          "loadable",
          f"The message names the property that broke ({WHERE}/async_ckpt.py): a save that stalls as long as a "
          "blocking one waits for its own write; a checkpoint holding a later step's weights was written from "
          "tensors training kept changing; save must return once its snapshot exists; a failed all-reduce "
          "means the write's collectives share training's group (checker hint lab8 async_ckpt.save)"),
    Check("goodput_formulas", "checkpoint_interval and predict_goodput at a cluster's hidden numbers (saves of "
          "5-60 s, restarts of 2-10 min, a failure every 4-48 h, intervals at half, once and twice the optimum)",
          f"The message gives the inputs and the expected value ({WHERE}/goodput.py): an interval off by a factor "
          "mostly leaves the save cost out of the balance, or balances the wrong costs (checker hint lab8 "
          "goodput.checkpoint_interval); a goodput off by the restart's share, the save stalls' or half an "
          "interval's share of the time leaves that cost out (checker hint lab8 goodput.predict_goodput)"),
    Check("goodput_chaos", f"a job using your save_checkpoint and resume, killed at exponential times (MTBF "
          f"{lab8_chaos.MTBF_S} s; one kill inside a save) and restarted each time: it finishes with every kept "
          "loss bit-identical to an uninterrupted run's, each restart resumes from the newest complete "
          "checkpoint, the measured goodput is within "
          f"{lab8_chaos.GOODPUT_BAND} of your prediction, your interval within {lab8_chaos.INTERVAL_BAND:.0%} of "
          "Young-Daly's for the measured save cost",
          f"The message names what broke ({WHERE}): a restart that crashed or resumed from another step than the "
          "newest complete checkpoint read a torn folder or missed the newest one (checker hint lab8 "
          "elastic.resume); losses that differ mean state did not come back; a goodput far from your prediction "
          "means your model of the time leaves a cost out (checker hint lab8 goodput.predict_goodput)",
          symptoms=((r"\.metadata|CheckpointException|No such file",
                     f"A restart read a checkpoint folder that a kill left half-written ({WHERE}/elastic.py): "
                     "resume must load only what the commit published, never the newest folder on disk "
                     "(checker hint lab8 elastic.resume)"),)),
]
ROOT_CHECKS = {"hsdp_internode_bytes"}  # the bytes come from a real link's counters


def needs_root(why: str) -> str:
    """How to run a check that needs a real link (NOT RUN without one: checker/labs/_common.py)."""
    return f"{why}. Run `sudo .venv/bin/checker grade lab8` (CI does), or see {WHERE}/README.md"


# ---------------------------------------------------------------- worker side
def task_probe(ctx, target):
    return probe(LAB, target)


def task_link_up(ctx, target, owner_pid, rate_mbit):
    """Two namespaces joined by a tbf-shaped veth pair, named after the checker's pid (cleanup_stale spares
    them while it lives, and clears them after a crash). The checker deletes them itself."""
    import importlib.util

    from checker.harness import REPO_ROOT

    spec = importlib.util.spec_from_file_location("_lab8_slowlink", REPO_ROOT / "solutions" / "lab4_debugging" /
                                                  "slowlink.py")
    sl = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sl
    spec.loader.exec_module(sl)
    ok, why = sl.netns_available()
    if not ok:
        return {"available": False, "why": why}
    sl.cleanup_stale()
    link = sl.Link(sl._tag(owner_pid), rate_mbit=rate_mbit)
    try:
        link.create()
    except BaseException:
        link.close()
        raise
    return {"available": True, "ns": list(link.ns), "veth": list(link.veth), "addr": list(link.addr)}


TASKS = {"probe": task_probe, "link_up": task_link_up, **lab8_tasks.TASKS, **lab8_units.TASKS, **lab8_async.TASKS,
         **lab8_chaos.TASKS}


# ---------------------------------------------------------------- checker side
def _link_down(link: dict | None) -> None:
    for ns in (link or {}).get("ns", []):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def _nodes_spec(h, name, plan, link, worker_args, budget_s, kill=None) -> dict:
    # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: the workers' store is made anew in each rendezvous round. Shared
    # (torch's default), the store outlives the round, so after a restart the first workers up read the
    # previous round's gloo addresses, connect to ranks that have exited, and the restart fails.
    nodes = [{"ns": link["ns"][g] if link else None, "torchrun": plan[g],
              "env": {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}} for g in range(2)]
    worker = ["-m", "checker.worker", *h._worker_args("nodes", h.workdir / f"{name}.result.json",
                                                     {**worker_args, "workdir": str(h.workdir)})]
    path = h.workdir / f"{name}.spec.json"
    path.write_text(json.dumps({"nodes": nodes, "worker": worker, "kill": kill}))
    # Each node runs inside the checker's own network namespace (`ip netns exec`), which a bwrap sandbox
    # could not enter: these runs are isolated by their namespaces, not by bwrap (checker/README.md).
    return dict(name=name, task="", budget_s=budget_s, nproc=WORLD_SIZE, sandbox=link is None,
                argv=[sys.executable, "-m", "checker.labs.lab8_nodes", str(path)])
