"""The slides' figures and tables, each drawn from bench/results.json (make bench): never from typed numbers.

A figure is `fn(results) -> (matplotlib Figure, caption)`, a table `fn(results) -> ((header, rows), caption)`,
registered under a name the decks use (`::: figure NAME`, `::: table NAME`) and the results sections it
reads, whose machine and time the caption quotes. A function raises NotMeasured when its section is missing or
incomplete; the deck then shows a labelled placeholder instead of a number.
"""
from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURES: dict[str, tuple] = {}
TABLES: dict[str, tuple] = {}
BLUE, ORANGE, GREEN, GREY, PURPLE = "#0b5cad", "#e8710a", "#1a7f37", "#8c959f", "#8250df"
KIND = {"naive": ORANGE, "bucketed": BLUE, "torch": GREEN, "gpipe": ORANGE, "1f1b": BLUE}

plt.rcParams.update({"font.size": 11, "axes.spines.top": False, "axes.spines.right": False,
                     "axes.titlesize": 12, "axes.titleweight": "bold", "figure.dpi": 110,
                     "savefig.bbox": "tight", "legend.frameon": False})


class NotMeasured(Exception):
    """What the figure needs is not in results.json yet."""


def figure(name: str, *sections: str):
    def register(fn):
        FIGURES[name] = (fn, sections)
        return fn
    return register


def table(name: str, *sections: str):
    def register(fn):
        TABLES[name] = (fn, sections)
        return fn
    return register


def need(results: dict, *path):
    """results[path[0]][path[1]]...; NotMeasured naming what is missing."""
    cur = results
    for i, key in enumerate(path):
        try:
            cur = cur[key]
        except (KeyError, IndexError, TypeError):
            where = ".".join(map(str, path[:i + 1]))
            raise NotMeasured(f"bench/results.json has no {where} yet") from None
    return cur


def provenance(results: dict, sections: tuple[str, ...]) -> str:
    """Where and when: each section's own machine/measured_at where it has them (lab 4 and 6 are refreshed
    on their own by bench/lab_figures.py; lab 5 may run on a cluster), else the file's."""
    parts = []
    for section in sections:
        sec = results.get(section) if isinstance(results.get(section), dict) else {}
        m = sec.get("machine") or results.get("machine") or {}
        when = sec.get("measured_at") or results.get("measured_at") or "?"
        where = (f"on {m.get('cores', '?')} cores ({m.get('cpu', '?')}), torch {m.get('torch', '?')}, "
                 f"{m.get('device', '?')}")
        parts.append((when, where, section))
    if len({(w, m) for w, m, _ in parts}) == 1:
        return f"measured {parts[0][0]} {parts[0][1]} (bench/results.json)"
    return "; ".join(f"{s} measured {w} {m}" for w, m, s in parts) + " (bench/results.json)"


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _fmt_bytes(n: float) -> str:
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:g} {unit}" if n % size == 0 else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


# ---------------------------------------------------------------- lab 1

PHASES = [("data", "data", GREY), ("fwd", "forward", BLUE), ("bwd", "backward", GREEN), ("comm", "comm wait", ORANGE),
          ("opt", "optimizer", PURPLE), ("other", "other", "#d0d7de")]


@figure("lab1_step", "grades")
def lab1_step(r):
    grade = next((g for g in need(r, "grades") if g.get("lab") == "lab1"), None)
    text = (grade or {}).get("info", {}).get("reference, checker's profiler: step time")
    if not text:
        raise NotMeasured("bench/results.json has no lab 1 step breakdown (grades -> lab1 -> info)")
    ms = {k: float(v) for k, v in re.findall(r"\b(data|fwd|bwd|comm|opt|other) ([\d.]+)", text)}
    fig, ax = plt.subplots(figsize=(9, 2.3))
    left = 0.0
    for key, label, colour in PHASES:
        if key in ms:
            ax.barh(0, ms[key], left=left, color=colour, edgecolor="white", height=0.6, label=f"{label} {ms[key]:.1f}")
            if ms[key] > 0.15 * sum(ms.values()):
                ax.text(left + ms[key] / 2, 0, f"{label}\n{ms[key]:.1f} ms", ha="center", va="center", fontsize=10,
                        color="white" if colour in (BLUE, GREEN, PURPLE) else "black")
            left += ms[key]
    ax.set_yticks([])
    ax.set_xlim(0, left)
    ax.set_xlabel("ms in one training step")
    ax.legend(ncol=len(ms), loc="upper center", bbox_to_anchor=(0.5, -0.45), fontsize=9)
    return fig, (f"Where lab 1's reference step goes (tiny, 16 x 64 tokens, one thread), by the checker's step "
                 f"profiler: {text}")


@figure("lab1_windows", "models")
def lab1_windows(r):
    models = need(r, "models")
    fig, axes = plt.subplots(1, len(models), figsize=(9, 3))
    for ax, m in zip(axes if len(models) > 1 else [axes], models):
        w = m["tokens_per_s_windows"]
        ax.plot(range(1, len(w) + 1), w, "o", color=BLUE)
        ax.axhline(m["tokens_per_s"], color=ORANGE, lw=1.5, label=f"median {m['tokens_per_s']:,}")
        ax.set_ylim(0, max(w) * 1.15)
        ax.set_xticks(range(1, len(w) + 1))
        ax.set_xlabel("timed window")
        ax.set_title(f"{m['config']} ({m['params'] / 1e6:.2f} M params), MFU {m['mfu_vs_cpu_matmul']:.0%}")
        ax.legend(loc="lower right")
    axes[0].set_ylabel("tokens/s") if len(models) > 1 else axes.set_ylabel("tokens/s")
    return fig, ("Tokens/s of the lab 1 step over repeated timed windows after warm-up: quote the median, "
                 "not the best window")


@table("lab1_models", "models")
def lab1_models(r):
    rows = [[m["config"], f"{m['params']:,}", f"{m['batch']} x {m['seq_len']}", f"{m['tokens_per_s']:,}",
             f"{m['mfu_vs_cpu_matmul']:.1%}", f"{m['model_state_bytes']:,}", f"{m['formula_bytes']:,}"]
            for m in need(r, "models")]
    return (["model", "Ψ params", "batch x seq", "tokens/s", "MFU", "bytes measured", "16Ψ + 4·tensors"], rows), \
        "Model-state bytes counted from the tensors vs the formula; MFU against a matmul measured on this CPU"


# ---------------------------------------------------------------- lab 2

@figure("lab2_ddp", "ddp")
def lab2_ddp(r):
    rows = need(r, "ddp")
    kinds = list(rows[0]["tokens_per_s"])
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(kinds)
    for j, k in enumerate(kinds):
        xs = [i + (j - (len(kinds) - 1) / 2) * width for i in range(len(rows))]
        ys = [row["tokens_per_s"][k] for row in rows]
        ax.bar(xs, ys, width * 0.95, color=KIND.get(k, GREY), label=k)
        for x, y, row in zip(xs, ys, rows):
            eff = y / (row["world_size"] * rows[0]["tokens_per_s"][k])
            ax.text(x, y, f"{y / 1e3:.0f}k" + (f"\n{eff:.0%}" if row["world_size"] > 1 else ""),
                    ha="center", va="bottom", fontsize=9)
    ideal = [row["world_size"] * max(rows[0]["tokens_per_s"].values()) for row in rows]
    ax.plot(range(len(rows)), ideal, "--", color=GREY, lw=1, label="N x the best 1-rank")
    ax.set_xticks(range(len(rows)), [f"{row['world_size']} rank{'s' if row['world_size'] > 1 else ''}" for row in rows])
    ax.set_ylabel("global tokens/s")
    ax.set_ylim(0, max(ideal) * 1.3)
    ax.legend(ncol=4, loc="upper left")
    return fig, ("Data parallel, tiny, 16 x 64 tokens per rank (weak scaling), medians of interleaved windows; "
                 "% = scaling efficiency tokens/s(N) / (N x tokens/s(1))")


@figure("allreduce", "allreduce")
def allreduce(r):
    a = need(r, "allreduce")
    xs = [row["bytes"] for row in a["rows"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.3))
    ax1.loglog(xs, [row["ms"] for row in a["rows"]], "o-", color=BLUE)
    ax1.set_xlabel("bytes per all-reduce")
    ax1.set_ylabel("ms (median)")
    ax1.set_title("time: flat = latency, slope 1 = bandwidth")
    ax2.semilogx(xs, [row["busbw_GBps"] for row in a["rows"]], "o-", color=GREEN)
    ax2.set_xlabel("bytes per all-reduce")
    ax2.set_ylabel("bus bandwidth, GB/s")
    ax2.set_title("busbw = S/t x 2(N-1)/N")
    return fig, f"All-reduce on {a['backend']}, {a['world_size']} ranks on one machine (bench/dist_bench.py)"


# ---------------------------------------------------------------- lab 3

@figure("lab3_sharding", "sharding")
def lab3_sharding(r):
    rows = need(r, "sharding")
    names = [row["strategy"] for row in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
    xs = range(len(rows))
    ax1.bar(xs, [row["bytes_per_param"] for row in rows], color=BLUE, label="measured from the tensors")
    ax1.plot(xs, [row["bytes_formula"] / row["psi"] for row in rows], "_", color=ORANGE, ms=26, mew=3, label="formula")
    ax1.set_xticks(xs, names, rotation=30)
    ax1.set_ylabel("model-state bytes / param / rank")
    ax1.set_title(f"memory, N = {rows[0]['world_size']}")
    ax1.legend(loc="upper right", fontsize=9)
    ddp = next((row["tokens_per_s"] for row in rows if row["strategy"] == "ddp"), None)
    keys = [("forward_s", "forward", BLUE), ("backward_s", "backward", GREEN), ("optimizer_s", "optimizer", PURPLE)]
    bottom = [0.0] * len(rows)
    for key, label, colour in keys:
        ys = [1e3 * (row.get("phases", {}).get(key) or 0) for row in rows]
        ax2.bar(xs, ys, bottom=bottom, color=colour, label=label)
        bottom = [b + y for b, y in zip(bottom, ys)]
    for x, row, b in zip(xs, rows, bottom):
        if ddp:
            ax2.text(x, b, f"{row['tokens_per_s'] / ddp:.2f}x", ha="center", va="bottom", fontsize=9)
    ax2.set_xticks(xs, names, rotation=30)
    ax2.set_ylabel("ms per step (rank 0)")
    ax2.set_title("time, and tokens/s vs DDP")
    ax2.set_ylim(0, max(bottom) * 1.2)
    ax2.legend(fontsize=9, loc="upper left")
    return fig, ("tiny, fp32 AdamW, solutions/lab3_sharding/compare.py: bytes each rank holds (DeepSpeed: weights + "
                 "fp32 master partition + moments) and where its step time goes")


@table("lab3_sharding", "sharding")
def lab3_table(r):
    rows = [[row["strategy"], f"{row['bytes_per_param']:.3f}", f"{row['bytes_formula'] / row['psi']:.3f}",
             f"{row['tokens_per_s']:,.0f}", len(row["checkpoint"]), f"{sum(row['checkpoint'].values()) / 1e6:.2f}"]
            for row in need(r, "sharding")]
    return (["strategy", "B/param/rank measured", "formula", "tokens/s", "checkpoint files", "checkpoint MB"], rows), \
        "Sharding side by side, tiny, 2 ranks, fp32 AdamW"


# ---------------------------------------------------------------- lab 4

def _interp_ms(rows: list[dict], nbytes: float) -> float:
    """ms at nbytes, linear between the two measured sizes around it (log-log would hide the latency floor)."""
    rows = sorted(rows, key=lambda x: x["bytes"])
    for lo, hi in zip(rows, rows[1:]):
        if lo["bytes"] <= nbytes <= hi["bytes"]:
            f = (nbytes - lo["bytes"]) / (hi["bytes"] - lo["bytes"])
            return lo["ms"] + f * (hi["ms"] - lo["ms"])
    return rows[-1]["ms"] * nbytes / rows[-1]["bytes"]


@figure("lab4_links", "lab4", "allreduce")
def lab4_links(r):
    slow = need(r, "lab4", "slow_link")
    fast = need(r, "allreduce")
    grad = 4 * next(m["params"] for m in need(r, "models") if m["config"] == "tiny")
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for rows, label, colour in ((fast["rows"], f"this machine's {fast['backend']} (bench allreduce)", GREEN),
                                (slow["rows"], f"incident 8's link: {slow['rate_GBps']} GB/s + "
                                               f"{slow['latency_ms']:g} ms (emulated)", ORANGE)):
        ax.loglog([x["bytes"] for x in rows], [x["ms"] for x in rows], "o-", color=colour, label=label)
        t = _interp_ms(rows, grad)
        ax.annotate(f"{t:.1f} ms", (grad, t), textcoords="offset points", xytext=(8, -4), fontsize=10, color=colour)
    ax.axvline(grad, color=GREY, ls="--", lw=1)
    ax.text(grad, ax.get_ylim()[0], f" tiny's gradient, {grad / 1e3:.0f} KB", va="bottom", fontsize=9, color=GREY)
    ax.set_xlabel("bytes per all-reduce")
    ax.set_ylabel("ms (median)")
    ax.legend(loc="upper left", fontsize=9)
    k = slow.get("micro_batches", 4)
    return fig, (f"All-reduce time vs size, {slow['world_size']} ranks. Incident 8 all-reduces the whole gradient on "
                 f"each of {k} micro-batches; no_sync on the first {k - 1} pays it once per step")


@table("lab4_desync", "lab4_forensics")
def lab4_desync(r):
    """Each rank's last flight-recorder entries for two of desync.py's faulty jobs: the first row where they differ."""
    cases = need(r, "lab4_forensics", "desync")
    rows = []
    for kind, c in cases.items():
        ranks = {int(k): {e["seq"]: e for e in v} for k, v in c["ranks"].items()}
        for seq in sorted(set().union(*ranks.values())):
            cells = [f"{e['op']} {e['sizes'][0]} {e['dtypes'][0]}" if e else "—"
                     for e in (ranks[k].get(seq) for k in sorted(ranks))]
            mark = " ←" if seq == c["truth"]["seq"] else ""
            rows.append([kind, f"{seq}{mark}", *cells])
    answers = "; ".join(f"{k}: rank {c['answer']['rank']}, seq {c['answer']['seq']}, {c['answer']['kind']} "
                        f"(injected: rank {c['truth']['rank']})" for k, c in cases.items())
    return (["case", "collective_seq_id", *(f"rank {k}" for k in sorted(next(iter(cases.values()))["ranks"]))],
            rows), f"The ranks' flight recorders side by side (desync.py, 3 ranks, gloo). find_desync: {answers}"


@figure("lab4_linkprobe", "lab4_forensics")
def lab4_linkprobe(r):
    probe = need(r, "lab4_forensics", "link_probe")
    pairs = probe["pairs"]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    names = list(pairs)
    colours = [ORANGE if str(probe["slow_rank"]) in k.split("-") else GREEN for k in names]
    ax.bar(names, [pairs[k] for k in names], color=colours)
    for i, k in enumerate(names):
        ax.text(i, pairs[k], f"{pairs[k]:.3f} GB/s", ha="center", va="bottom", fontsize=10)
    ax.set_yscale("log")
    ax.set_xlabel("pair of ranks")
    ax.set_ylabel("GB/s (median of 12 spans)")
    a = probe["answer"]
    real = r["lab4_forensics"].get("link_probe_netns")
    more = (f"; over a real cable (namespaces, tbf {real['rate_mbit']:g} Mbit/s = {real['rate_mbit'] / 8e3:g} GB/s "
            f"on rank {real['slow_rank']}): rank {real['answer']['rank']}, {real['answer']['gbps']:.4f} GB/s"
            if real else "")
    return fig, (f"linkprobe.py: {probe['nbytes'] >> 20} MiB each way per pair, rank {probe['slow_rank']}'s link "
                 f"emulated at {probe['rate_GBps']} GB/s. slow_rank: rank {a['rank']}, {a['gbps']:.4f} GB/s{more}")


# ---------------------------------------------------------------- lab 5

@figure("lab5_scaling", "lab5")
def lab5_scaling(r):
    rows = need(r, "lab5", "scaling")
    ok = isinstance(rows, list) and rows and all(isinstance(x, dict) and isinstance(x.get("world_size"), int)
                                                 and isinstance(x.get("tokens_per_s"), (int, float)) for x in rows)
    if not ok:  # written by lab 5's sweep: say what the figure expects rather than guess
        raise NotMeasured("bench/results.json's lab5.scaling needs rows with world_size and tokens_per_s")
    rows = sorted(rows, key=lambda x: x["world_size"])
    ws, tps = [x["world_size"] for x in rows], [x["tokens_per_s"] for x in rows]
    eff = [x["efficiency"] if isinstance(x.get("efficiency"), (int, float)) else t / (w * tps[0] / ws[0])
           for x, w, t in zip(rows, ws, tps)]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot(ws, tps, "o-", color=BLUE, label="measured")
    ax.plot(ws, [w * tps[0] / ws[0] for w in ws], "--", color=GREY, label="linear from the smallest run")
    for w, t, e in zip(ws, tps, eff):
        ax.annotate(f"{e:.0%}", (w, t), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=10)
    ax.set_xticks(ws)
    ax.set_xlabel("ranks")
    ax.set_ylabel("global tokens/s")
    ax.legend(loc="upper left")
    return fig, "Scaling sweep from lab 5's batch jobs; % = efficiency tokens/s(N) / (N x tokens/s(1))"


# ---------------------------------------------------------------- lab 6

@figure("lab6_bubble", "lab6")
def lab6_bubble(r):
    pp = need(r, "lab6", "pipeline")
    rows = pp["bubble"]
    ms = [x["m"] for x in rows]
    fig, ax = plt.subplots(figsize=(9, 3.4))
    fine = [m / 4 for m in range(4, 4 * max(ms) + 1)]
    ax.plot(fine, [(pp["p"] - 1) / (m + pp["p"] - 1) for m in fine], color=GREY, label="(p−1)/(m+p−1)")
    for s in ("gpipe", "1f1b"):
        ax.plot(ms, [x[s] for x in rows], "o", color=KIND[s], label=f"{'GPipe' if s == 'gpipe' else '1F1B'}, measured")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble (idle / step)")
    ax.set_ylim(0, 0.6)
    ax.legend()
    return fig, (f"p = {pp['p']} stages that sleep {pp['forward_ms']:g} ms forward + {pp['backward_ms']:g} ms backward "
                 f"per micro-batch (labs/instruments/stage_probe.py); least idle of 3 steps")


@figure("lab6_timeline", "lab6")
def lab6_timeline(r):
    from labs.instruments.schedule_timeline import plot_schedule
    pp = need(r, "lab6", "pipeline")
    fig, axes = plt.subplots(2, 1, figsize=(9.5, 3.6), sharex=True)
    for ax, s in zip(axes, ("gpipe", "1f1b")):
        ranks = [[{"kind": e["kind"], "mb": e["mb"], "start": e["start_ms"] / 1e3, "end": e["end_ms"] / 1e3}
                  for e in events] for events in pp["timeline"][s]]
        plot_schedule(ax, ranks)
        ax.set_title(f"{'GPipe' if s == 'gpipe' else '1F1B'}, m = {pp['timeline_m']}", loc="left")
        if ax is not axes[-1]:
            ax.set_xlabel("")
    fig.tight_layout()
    return fig, "Each rank's recorded forwards (F, light) and backwards (B, dark): same bubble, different order"


@figure("lab6_activations", "lab6")
def lab6_activations(r):
    pp = need(r, "lab6", "pipeline")
    act = pp["activation_peak_bytes"]
    fig, ax = plt.subplots(figsize=(7, 3))
    stages = range(len(act["gpipe"]))
    for j, s in enumerate(("gpipe", "1f1b")):
        xs = [i + (j - 0.5) * 0.38 for i in stages]
        ax.bar(xs, [b / 1e6 for b in act[s]], 0.36, color=KIND[s], label="GPipe" if s == "gpipe" else "1F1B")
        for x, b in zip(xs, act[s]):
            ax.text(x, b / 1e6, f"{b / 1e6:.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(stages), [f"stage {i}" for i in stages])
    ax.set_ylabel("MB saved for backward, at peak")
    ax.legend()
    return fig, f"tiny GPT cut in {len(act['gpipe'])} stages, m = {pp['gpt_m']} micro-batches of 2 x 64 tokens"


@table("lab6_tp", "lab6")
def lab6_tp(r):
    tp = need(r, "lab6", "tensor_parallel")
    rows = []
    for key, label in (("unsharded", "unsharded"), ("by_hand", "parallelize (by hand)"), ("dtensor", "DTensor plan")):
        x = tp[key]
        rows.append([label, f"{x['params']:,}", f"{x['split_layer_params']:,}", f"{x['activation_bytes'] / 1e6:.2f}",
                     f"{x['all_reduces_forward']} + {x['all_reduces_backward']}"])
    header = ["per rank", "param bytes", "of which split layers", "saved activations MB", "all-reduces fwd + bwd"]
    return (header, rows), \
        (f"Tensor parallel, {tp['config']}, N = {tp['world_size']}, batch {tp['batch'][0]} x {tp['batch'][1]}, "
         f"one step (solutions/lab6_model_parallel/tp_report.py)")
