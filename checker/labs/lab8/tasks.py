"""Lab 8's worker side: every task a lab 8 run can do, gathered from the modules that measure (multinode.py: the
two-node job's ranks; units.py; async_save.py; chaos.py), and the two of its own: the probe and the link's set-up."""
from __future__ import annotations

import sys

from checker.labs._common import probe
from checker.labs.lab8 import LAB, async_save, chaos, multinode, units


def task_probe(ctx, target):
    return probe(LAB, target)


def task_link_up(ctx, target, owner_pid, rate_mbit):
    """Two namespaces joined by a tbf-shaped veth pair, named after the checker's pid (cleanup_stale spares
    them while it lives, and clears them after a crash). The checker deletes them itself (plan.py)."""
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


TASKS = {"probe": task_probe, "link_up": task_link_up,
         "plan": multinode.task_plan, "nodes": multinode.task_nodes,
         "units": units.task_units,
         "async": async_save.task_async, "async_load": async_save.task_async_load,
         "goodput_units": chaos.task_goodput_units, "goodput_chaos": chaos.task_goodput_chaos}
