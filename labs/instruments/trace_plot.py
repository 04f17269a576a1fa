"""Draw exported traces as a timeline PNG, for reading a trace without a browser (docs/reading-a-trace.md).

    python -m labs.instruments.trace_plot runs/lab2/trace-rank0.json runs/lab2/trace-rank1.json --out timeline.png

One lane per thread that did something worth seeing, per trace (one trace per rank): the training
thread shows the StepProfiler's phases (data, forward, backward, comm, optimizer) and a tick where each
all-reduce was launched; a collective's own threads (gloo) or the GPU's streams show the collectives.
Dashed lines mark where each profiled step (ProfilerStep#N) began. Times are ms from the first step
of the first trace: traces of one machine share its clock, so ranks line up (align_each=True puts
each trace's own first step at 0 instead: for side-by-side runs that did not run at the same time).
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from .trace import COMM, PHASE_NAMES, read_trace, thread_names

COLOURS = {"data": "#b0b0b0", "forward": "#4c72b0", "backward": "#dd8452", "comm": "#c44e52",
           "optimizer": "#55a868", "all-reduce": "#8172b3"}
LAUNCH = re.compile(r"^c10d::allreduce_$")


def _lanes(events, names: dict, label: str) -> list[tuple[str, list]]:
    """[(lane label, [(kind, start_us, dur_us)])] for one trace."""
    by_tid: dict = {}
    for e in events:
        name = e.get("name", "")
        kind = (name if name in PHASE_NAMES else "all-reduce" if COMM.search(name)
                else "launch" if LAUNCH.match(name) else None)
        if kind:
            by_tid.setdefault(e.get("tid"), []).append((kind, e["ts"], e["dur"]))
    lanes = []
    for tid, items in sorted(by_tid.items(), key=lambda kv: (not any(k in PHASE_NAMES for k, *_ in kv[1]), str(kv[0]))):
        thread = re.sub(r"^thread \d+ \((.*)\)$", r"\1", str(names.get(tid, tid)))
        role = "training thread" if any(k in PHASE_NAMES for k, *_ in items) else f"{thread} thread"
        lanes.append((f"{label} {role}", items))
    return lanes


def plot_traces(paths, labels=None, title: str = "", out=None, ax=None, steps: int | None = None,
                align_each: bool = False):
    import matplotlib
    if out is not None and ax is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    traces = [read_trace(p) for p in paths]
    labels = labels or [f"rank {i}" for i in range(len(paths))]

    def first_step(evs):
        starts = [e["ts"] for e in evs if e.get("name", "").startswith("ProfilerStep")]
        return min(starts) if starts else min(e["ts"] for e in evs)
    if align_each:  # shift each trace so that its first step starts where the first trace's does
        t0s = [first_step(ev) for ev in traces]
        traces = [[{**e, "ts": e["ts"] - t + t0s[0]} for e in ev] for ev, t in zip(traces, t0s)]
    t0 = min(first_step(ev) for ev in traces)
    t_end = None
    if steps is not None:  # show only the first `steps` profiled steps of the first trace
        first = sorted(e["ts"] + e["dur"] for e in traces[0] if e.get("name", "").startswith("ProfilerStep"))
        t_end = first[min(steps, len(first)) - 1] if first else None
    lanes, rows = [], []  # rows[i]: (first lane, last lane) of trace i
    for p, ev, lab in zip(paths, traces, labels):
        mine = _lanes(ev, thread_names(p), lab)
        rows.append((len(lanes), len(lanes) + len(mine) - 1))
        lanes += mine
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.55 * len(lanes) + 1.4))
    for y, (_, items) in enumerate(lanes):
        for kind, ts, dur in items:
            if t_end is not None and ts > t_end:
                continue
            x, w = (ts - t0) / 1e3, dur / 1e3
            if kind == "launch":
                ax.plot([x, x], [y - 0.42, y + 0.42], color=COLOURS["all-reduce"], lw=1.2)
            else:
                ax.barh(y, w, left=x, height=0.7 if kind != "all-reduce" else 0.5, color=COLOURS[kind],
                        edgecolor="white", linewidth=0.3)
    for ev, (lo, hi) in zip(traces, rows):  # each trace's step starts, across its own lanes
        for e in ev:
            if e.get("name", "").startswith("ProfilerStep") and (t_end is None or e["ts"] < t_end):
                ax.vlines((e["ts"] - t0) / 1e3, lo - 0.5, hi + 0.5, color="k", ls="--", lw=0.8)
    ax.set_yticks(range(len(lanes)), [lab for lab, _ in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first profiled step began (dashed: a step begins)")
    if t_end is not None:
        ax.set_xlim(0, (t_end - t0) / 1e3)
    seen = {k for _, items in lanes for k, *_ in items} | ({"all-reduce"} if any(
        k == "launch" for _, items in lanes for k, *_ in items) else set())
    handles = [Patch(color=c, label="all-reduce\n(tick: launched)" if k == "all-reduce" else k)
               for k, c in COLOURS.items() if k in seen]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    if title:
        ax.set_title(title, loc="left", fontsize=10)
    if out is not None:
        plt.savefig(out, dpi=110, bbox_inches="tight")
        plt.close()
    return ax


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--steps", type=int, default=None, help="show only the first N profiled steps")
    args = ap.parse_args(argv)
    plot_traces(args.traces, title=args.title, out=Path(args.out), steps=args.steps)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
