"""What a pipeline schedule did, read from timestamps: bubble fraction, live activations, and the picture.

No torch here: the checker's own process (which never imports torch) and the notebooks both use it.

An event is one micro-batch's forward or backward on one stage:
    {"kind": "F" | "B", "mb": i, "start": t0, "end": t1}      (time.perf_counter() seconds)
perf_counter is CLOCK_MONOTONIC on Linux: one clock for every process on a machine, so the ranks'
events line up without any clock synchronisation.

The bubble. p stages, m micro-batches, forward t_f and backward t_b per micro-batch per stage. The
first stage's last forward ends at m t_f; the last stage can start its first forward only after p-1
forwards have crossed the pipe, and the backward wave drains the same way, so a step lasts
(m + p - 1)(t_f + t_b) while each stage computes m (t_f + t_b) of it:
    bubble = idle / step = (p - 1) / (m + p - 1)         p=2: m=1 -> 1/2, m=4 -> 1/5, m=8 -> 1/9
GPipe and 1F1B have the *same* bubble; 1F1B only reorders the work so that a stage holds at most
p - stage micro-batches' activations at once instead of m (see peak_live).
"""
from __future__ import annotations


def ideal_bubble(p: int, m: int) -> float:
    """(p - 1) / (m + p - 1): the idle fraction of a stage in a GPipe or 1F1B step with equal stages."""
    return (p - 1) / (m + p - 1)


def window(ranks: list[list[dict]]) -> tuple[float, float]:
    """(first start, last end) over every rank: the step as the whole pipeline saw it."""
    events = [e for r in ranks for e in r]
    return min(e["start"] for e in events), max(e["end"] for e in events)


def busy(events: list[dict]) -> float:
    return sum(e["end"] - e["start"] for e in events)


def bubble_fraction(ranks: list[list[dict]]) -> float:
    """Mean over stages of idle / step: 1 - (a stage's compute time) / (the step's span)."""
    t0, t1 = window(ranks)
    return sum(1 - busy(r) / (t1 - t0) for r in ranks) / len(ranks)


def live_over_time(events: list[dict], merge_s: float = 0.0) -> list[tuple[float, int]]:
    """(time, micro-batches held) at every change. A micro-batch is live on a stage from the start of its
    forward (its activations start being saved) to the end of its backward (they are freed). merge_s: a
    backward that ends within merge_s of the next forward's start hands its memory straight on; drop that
    instant's dip (for drawing; the peak is the same either way)."""
    changes = sorted([(e["start"], 1) for e in events if e["kind"] == "F"]
                     + [(e["end"], -1) for e in events if e["kind"] == "B"], key=lambda c: (c[0], c[1]))  # free first
    kept = []
    for t, d in changes:
        if d == 1 and kept and kept[-1][1] == -1 and t - kept[-1][0] <= merge_s:
            kept.pop()
            continue
        kept.append((t, d))
    out, n = [], 0
    for t, d in kept:
        n += d
        out.append((t, n))
    return out


def peak_live(events: list[dict]) -> int:
    """Most micro-batches whose activations this stage held at once: m for GPipe, p - stage for 1F1B."""
    return max((n for _, n in live_over_time(events)), default=0)


def plot_schedule(ax, ranks: list[list[dict]], title: str = "") -> None:
    """A Gantt chart: one row per stage, forward boxes light, backward boxes dark, micro-batch numbers inside."""
    t0, t1 = window(ranks)
    colours = {"F": "#9ecae1", "B": "#3182bd"}
    for stage, events in enumerate(ranks):
        for e in events:
            left, width = 1e3 * (e["start"] - t0), 1e3 * (e["end"] - e["start"])
            ax.barh(stage, width, left=left, height=0.8, color=colours[e["kind"]], edgecolor="white")
            ax.text(left + width / 2, stage, f"{e['kind']}{e['mb']}", ha="center", va="center", fontsize=8,
                    color="black" if e["kind"] == "F" else "white")
    ax.set_yticks(range(len(ranks)), [f"stage {s}" for s in range(len(ranks))])
    ax.invert_yaxis()
    ax.set_xlim(0, 1e3 * (t1 - t0))
    ax.set_xlabel("ms since the step started")
    m = 1 + max(e["mb"] for e in ranks[0])
    ax.set_title(f"{title}  bubble {bubble_fraction(ranks):.0%} (formula {ideal_bubble(len(ranks), m):.0%})")
