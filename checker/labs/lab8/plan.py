"""Lab 8's parent side: the runs a grade starts (the link, the learner's torchrun options read, then two phases of
runs two at a time), the context the evaluators read beside them, and what they measured beside the checks."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

from checker.labs import _crosscheck
from checker.labs._common import Check, run_info, runs_needed
from checker.labs.lab8 import KILL_AFTER, RATE_MBIT, SEED, STEPS, WORLD_SIZE
from checker.labs.lab8.chaos import WALL_S
from checker.labs.lab8.checks import CHECKS, _results, _where, formula  # noqa: F401  (CHECKS: the parent side's)

GRADE_SECONDS = 120  # two 4-rank torchrun jobs (one restarts its workers), two 2-rank runs, the chaos job (~40 s)


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
                argv=[sys.executable, "-m", "checker.labs.lab8.nodes", str(path)],
                # the reference's run of the same steps judges what this one compared (plan_nodes' options are the
                # learner's, so it starts as the checker starts its own runs: 4 ranks on loopback)
                crosscheck=kill is None,
                twin=dict(task="nodes", nproc=WORLD_SIZE, args={**worker_args, "link_ifs": ["lo", "lo"]}))


def grade(h, checks: list[Check]) -> tuple[list, list]:
    from checker.spawn import free_port

    need = runs_needed(checks)
    need_nodes = bool(need & {"nodes", "elastic"})
    runs, link, plans = {}, None, {}
    try:
        if need_nodes:
            up = h.run("link_up", "link_up", dict(owner_pid=os.getpid(), rate_mbit=RATE_MBIT), budget_s=60,
                       sandbox=False,  # it makes namespaces: it needs the host's privileges
                       target="solutions")  # the course's own set-up (its slowlink.py), no learner code in it
            res = up.result if not up.error() else {"available": False, "why": up.error().get("message", "")}
            link = res if res.get("available") else None
            host = link["addr"][0] if link else "127.0.0.1"
            ifs = link["veth"] if link else ["lo", "lo"]
            for run, restarts in (("nodes", 0), ("elastic", 1)):
                if run not in need:
                    continue
                # In a fresh namespace any port is free; on loopback ask the OS.
                port = random.randrange(20000, 30000) if link else free_port()
                p = h.run(f"plan_{run}", "plan", dict(endpoint=f"{host}:{port}", run_id=f"lab8{run}{port}",
                                                      max_restarts=restarts,
                                                      addrs=link["addr"] if link else [host, host]), budget_s=60)
                plans[run] = p
        first, second = [], []
        if "nodes" in plans and not plans["nodes"].error():
            # the unit run, a few seconds, ahead of the long runs; read by the nodes run's checks
            first.append(dict(name="units", task="units", nproc=2, budget_s=60, args={}))
            first.append(_nodes_spec(h, "nodes", plans["nodes"].result["torchrun"], link,
                                     dict(parts=["equiv"], seed=SEED, steps=STEPS, link_ifs=ifs), 150))
        first.append(dict(name="async", task="async", nproc=2, budget_s=90, kill_on="async_killme",
                          args=dict(root=str(h.workdir / "async_ckpt"))))
        # the goodput runs beside the elastic run (~45 s), not the nodes and async ones
        second += [dict(name="goodput_units", task="goodput_units", budget_s=60, args=dict(variant=h.variant)),
                   dict(name="goodput_chaos", task="goodput_chaos", budget_s=WALL_S + 60,
                        args=dict(root=str(h.workdir / "goodput"), variant=h.variant)),
                   dict(name="async_load", task="async_load", nproc=2, budget_s=60,  # after async's kill mid-write
                        args=dict(root=str(h.workdir / "async_ckpt" / "kept")))]
        if "elastic" in plans and not plans["elastic"].error():
            ckpt = str(h.workdir / "elastic_ckpt")
            kill = {"cue": str(h.workdir / "lose_node1"), "node": 1, "mark": str(h.workdir / "lost_at")}
            second.append(_nodes_spec(h, "elastic", plans["elastic"].result["torchrun"], link,
                                      dict(parts=["elastic"], seed=SEED, steps=STEPS, link_ifs=ifs, ckpt=ckpt,
                                           kill_after=KILL_AFTER), 180, kill))
        runs.update(h.run_phases([first, second], need))
    finally:
        _link_down(link)
    runs.update({f"plan_{k}": v for k, v in plans.items()})
    lost_at = h.workdir / "lost_at"
    ctx = {"link": link, "why_no_link": None if link else (res.get("why") if need_nodes else None),
           "lost_at": float(lost_at.read_text()) if lost_at.exists() else None}
    runs.update(_crosscheck.second_opinion(h, checks, runs, [first], ctx))
    return [c.evaluate(c, runs, ctx) for c in checks], info(runs, ctx)


def info(runs, ctx) -> list[tuple[str, str]]:
    rows = [("nodes", _where(ctx))] if ctx["link"] or ctx.get("why_no_link") else []
    rs, err = _results(runs, "nodes") if "nodes" in runs else (None, True)
    if not err and rs[0].get("ddp") and rs[0]["ddp"].get("link_bytes_per_step") is not None:
        r0 = rs[0]
        for n in ("ddp", "fsdp", "hsdp"):
            if r0.get(n):
                got, want = r0[n]["link_bytes_per_step"], formula(n, r0[n]["param_bytes"])
                rows.append((f"link bytes per step, {n}", f"{got / 1e3:.1f} kB measured, {want / 1e3:.1f} kB formula"))
    return rows + run_info(runs)
