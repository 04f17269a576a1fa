"""The advanced labs' figures and tables (labs 7, 8, 9 and 10), registered with slides/figures.py's decorators: the
decks name them as they name the others. Drawn from bench/results.json (make bench), never from typed numbers.
"""
from __future__ import annotations

import re

import matplotlib.pyplot as plt

from slides.figures import BLUE, GREEN, GREY, ORANGE, PURPLE, NotMeasured, figure, need, table

# ---------------------------------------------------------------- lab 7

@figure("lab7_bytes", "lab7")
def lab7_bytes(r):
    m = need(r, "lab7", "memory", "bytes")
    rows, c = m["rows"], m["cfg"]
    fig, ax = plt.subplots(figsize=(9, 3.4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [x["predicted"] / 1e3 for x in rows], 0.38, color=BLUE, label="predicted")
    ax.bar([x + 0.2 for x in xs], [x["measured"] / 1e3 for x in rows], 0.38, color=ORANGE, label="measured")
    for x, row in zip(xs, rows):
        ax.text(x, row["measured"] / 1e3, f"{row['measured'] / 1e3:.0f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(xs), [f"{x['precision']}\n{x['recompute']}" for x in rows])
    ax.set_ylabel("KB kept per block")
    ax.legend()
    return fig, (f"tiny GPT block (h = {c['n_embd']}, a = {c['n_head']}), b = {c['batch']}, s = {c['seq']}, "
                 "dropout 0.1, CPU: activation_bytes vs the storages alive after forward (measure.kept_bytes)")


@figure("lab7_precision", "lab7")
def lab7_precision(r):
    p = need(r, "lab7", "memory", "precision")
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    for name, colour in (("fp32", GREY), ("bf16", BLUE), ("fp16", ORANGE)):
        ax[0].plot(p[name]["losses"], color=colour, label=name)
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("loss")
    ax[0].legend()
    scales = p["fp16"]["scales"]
    ax[1].step(range(len(scales)), scales, where="post", color=ORANGE)
    ax[1].axvline(p["overflow_at"], color=GREY, ls=":")
    ax[1].set_yscale("log", base=2)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("fp16 loss scale")
    fig.tight_layout()
    return fig, (f"tiny GPT, same batches and dropout masks; fp32 masters in every run; an inf gradient injected at "
                 f"step {p['overflow_at']}: that fp16 step is skipped and the scale halves")


@table("lab7_cost", "lab7")
def lab7_cost(r):
    t = need(r, "lab7", "memory", "times")
    s, c = t["seconds"], t["cfg"]
    rows = [[m, f"{1e3 * v:.0f}", f"{v / s['none']:.2f}"] for m, v in s.items()]
    return (["recompute", "ms per fwd + bwd", "x none"], rows), \
        (f"h = {c['n_embd']}, b = {c['batch']}, s = {c['seq']}, one CPU thread, interleaved medians")


@figure("lab7_fast", "lab7")
def lab7_fast(r):
    f = need(r, "lab7", "fast")
    options = ("fused_adamw", "bf16", "batch2")
    fig, axes = plt.subplots(1, len(f), figsize=(10, 3.2), sharey=True)
    for ax, (name, row) in zip(axes, f.items()):
        xs = range(len(options))
        pred, meas = [row["predicted"][o] for o in options], [row["measured"][o] for o in options]
        ax.bar([x - 0.2 for x in xs], pred, 0.38, color=BLUE, label="predicted from the profile")
        ax.bar([x + 0.2 for x in xs], meas, 0.38, color=ORANGE, label="measured")
        for x, y in zip(xs, meas):
            ax.text(x + 0.2, y, f"{y:.2f}", ha="center", va="bottom", fontsize=9)
        ax.axhline(1.0, color=GREY, lw=1)
        ax.set_xticks(list(xs), ["fused AdamW", "bf16 autocast", "batch x 2"])
        ax.set_title(f"{name.replace('_', '-')} {tuple(row['profile']['shape'])}: "
                     f"{row['profile']['step_s'] * 1e3:.0f} ms, MFU {row['mfu']:.0%}", fontsize=10)
    axes[0].set_ylabel("tokens/s over the baseline's")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig, ("one CPU thread, CPU time, interleaved medians (bench/lab7_figures.py); shape = (h, layers, heads, "
                 "b, s); each switch pays at one shape and not at the other")


# ---------------------------------------------------------------- lab 8

@figure("lab8_link", "lab8")
def lab8_link(r):
    rows = need(r, "lab8", "speeds", "rows")
    rates = sorted({x["rate_mbit"] for x in rows}, reverse=True)
    colour = {"fsdp": ORANGE, "hsdp": BLUE}
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    for k, (key, label) in enumerate((("kb_per_step", "kB per step across the link"),
                                      ("ms_per_step", "ms per step"))):
        for j, strategy in enumerate(("fsdp", "hsdp")):
            got = {x["rate_mbit"]: x[key] for x in rows if x["strategy"] == strategy}
            xs = [i + (j - 0.5) * 0.38 for i in range(len(rates))]
            ys = [got.get(rate, 0) for rate in rates]
            ax[k].bar(xs, ys, 0.36, color=colour[strategy], label=strategy.upper())
            for x, y in zip(xs, ys):
                ax[k].text(x, y, f"{y:,.0f}", ha="center", va="bottom", fontsize=9)
        ax[k].set_xticks(range(len(rates)), [f"{rate} Mbit/s" for rate in rates])
        ax[k].set_ylabel(label)
    ax[1].legend(loc="upper left")  # the left panel's bars reach the top on both sides
    fig.tight_layout()
    return fig, ("2 nodes x 2 ranks of the tiny GPT, gloo; node 0's veth counters (tx + rx) and step time over "
                 "steps 2-8, medians of interleaved runs: the bytes do not depend on the link, the time does")


@figure("lab8_goodput", "lab8")
def lab8_goodput(r):
    from checker.labs.lab8 import chaos as ch  # the checker's own first-order model (no torch imported)

    g = need(r, "lab8", "goodput")
    rows = [x for x in g["rows"] if not x.get("failed")]
    if not rows:
        raise NotMeasured("bench/results.json's lab 8 goodput runs all failed")
    step_s, save_s = g["step_s"], g["save_s"]
    mtbfs = sorted({x["mtbf_s"] for x in rows})
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
    for mtbf, colour in zip(mtbfs, (ORANGE, BLUE, GREEN)):
        mine = sorted((x for x in rows if x["mtbf_s"] == mtbf), key=lambda x: x["factor"])
        restart = sorted(x["per_failure_s"]["restart"] for x in mine)[len(mine) // 2]  # the runs' median restart
        optimum = ch.young_daly(save_s, mtbf)  # seconds of training between saves
        factors = [0.2 + 0.02 * i for i in range(140)]  # 0.2x to 3x the optimum
        curve = [ch.goodput(step_s, save_s, restart, mtbf, max(1, round(f * optimum / step_s))) for f in factors]
        ax[0].plot(factors, curve, color=colour, label=f"predicted, MTBF {mtbf:g} s")
        ax[0].plot([x["factor"] for x in mine], [x["measured"] for x in mine], "o", color=colour,
                   label=f"measured, MTBF {mtbf:g} s")
    ax[0].axvline(1.0, color=GREY, ls=":")
    ax[0].set_xlabel("checkpoint interval / Young-Daly's sqrt(2 C MTBF)")
    ax[0].set_ylabel("goodput (useful step time / wall)")
    low = min(x["measured"] for x in rows) - 0.2
    ax[0].set_ylim(bottom=max(0.0, low))  # room under the curves for the legend
    ax[0].legend(fontsize=8, loc="lower center", ncol=2)
    labels = [f"{x['mtbf_s']:g} s\n{x['factor']:g}x" for x in rows]
    bottom = [0.0] * len(rows)
    for part, colour in (("redone", ORANGE), ("restart", PURPLE), ("save_stalls", BLUE)):
        ys = [x["per_failure_s"][part] for x in rows]
        ax[1].bar(range(len(rows)), ys, 0.6, bottom=bottom, color=colour, label=part.replace("_", " "))
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax[1].set_xticks(range(len(rows)), labels, fontsize=8)
    ax[1].set_xlabel("MTBF, interval (x Young-Daly)")
    ax[1].set_ylabel("seconds lost per failure")
    ax[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig, (f"checker/labs/lab8/chaos.py's job on the reference: {step_s * 1e3:.0f} ms steps, a "
                 f"{save_s * 1e3:.0f} ms save, a process killed at stratified exponential gaps and restarted from its "
                 "newest complete checkpoint; the curve is the first-order model at the runs' median restart, the dots "
                 "are measured (a 25 s run sees 4-8 failures: each dot is one draw of them, which is why the checker "
                 "reads the prediction at the rate that came)")


@table("lab8_bytes", "lab8")
def lab8_bytes(r):
    info = need(r, "lab8", "grade", "info")
    formulas = {"ddp": "2 g (N−1)/N B", "fsdp": "3 g (N−1)/N B", "hsdp": "2 (g−1) B"}
    rows = []
    for strategy, formula in formulas.items():
        m = re.match(r"([\d.]+) kB measured, ([\d.]+) kB formula", info.get(f"link bytes per step, {strategy}", ""))
        if not m:
            raise NotMeasured("bench/results.json's lab 8 grade counted no link bytes (graded without root: no veth)")
        got, want = float(m.group(1)), float(m.group(2))
        rows.append([strategy.upper(), formula, m.group(2), m.group(1), f"{got / want:.3f}"])
    head = ["strategy", "formula", "kB per step, formula", "kB per step, veth counters", "measured / formula"]
    return (head, rows), \
        "2 nodes × 2 ranks of the tiny GPT (B = 0.48 MB), node 0's veth counters over steps 2-8 of the grade's run"


@table("lab8_grade", "lab8")
def lab8_grade(r):
    g = need(r, "lab8", "grade")
    rows = [[name, "NOT RUN" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)]
            for name, value in g["checks"].items()]
    return (["check", "measured"], rows), (f"`checker grade lab8 --solutions`: exit {g['exit']}, "
                                           f"{g['checker_s']} s; elastic_recovery: seconds from the lost node to "
                                           "the first step after it")


# ---------------------------------------------------------------- lab 9

@figure("lab9_memory", "lab9")
def lab9_memory(r):
    f = need(r, "lab9", "figures")
    one, lengths = f["1"], f["1"]["lengths"]
    mib = lambda xs: [x / 2 ** 20 for x in xs]  # noqa: E731
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(lengths, mib(one["memory"]["naive"]), "o-", color=ORANGE, label="textbook (P kept: 4·b·h·s²)")
    ax.plot(lengths, mib(one["memory"]["flash"]), "s-", color=BLUE, label="flash")
    for n, colour in (("2", GREEN), ("4", PURPLE)):
        ax.plot(lengths, mib([max(col) for col in zip(*f[n]["memory"]["ring"])]), "^-", color=colour,
                label=f"ring, per rank, N = {n}")
    for formula in (one["memory"]["formula"], f["2"]["memory"]["formula"], f["4"]["memory"]["formula"]):
        ax.plot(lengths, mib(formula), ":", color=GREY, lw=1)
    ax.set(xscale="log", yscale="log", xlabel="sequence length s", ylabel="MiB kept for backward")
    ax.set_xticks(lengths, [str(s) for s in lengths])
    ax.minorticks_off()
    ax.legend(fontsize=9)
    b, h, d = one["shape"]
    return fig, (f"b = {b}, h = {h}, d = {d}, fp32, causal: the storages the autograd graph holds after forward "
                 "(the checker's measurement), dotted: 4·(3·bhsd + bhs)/N")


@table("lab9_bytes", "lab9")
def lab9_bytes(r):
    f = need(r, "lab9", "figures")
    rows = []
    for n in ("2", "4"):
        for kind in ("ring", "ulysses"):
            per, (fw, bw) = f[n]["bytes"][kind]["per_rank"], f[n]["bytes"][kind]["formula"]
            rows.append([n, kind, f"{max(x['forward'] for x in per) / 1024:,.0f}", f"{fw / 1024:,.0f}",
                         f"{max(x['backward'] for x in per) / 1024:,.0f}", f"{bw / 1024:,.0f}"])
    b, _, s, d = f["2"]["bytes"]["shape"]
    return (["N", "", "KiB sent forward", "formula", "KiB sent backward", "formula"], rows), \
        (f"per rank, one attention layer, b = {b}, h = 2N, s = {s}, d = {d}, fp32; counted from each rank's sends "
         "and all-to-alls; formulas: ring 2(N−1)/N·S and 2(N−1)/N·S + 2S, Ulysses 4(N−1)/N·S/N each way")


@figure("lab9_balance", "lab9")
def lab9_balance(r):
    f = need(r, "lab9", "figures")
    bal, alone = f["4"]["balance"], f["1"]["balance"]["rows"]
    share = lambda xs: [x / sum(xs) for x in xs]  # noqa: E731
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
    for a, layout in zip(ax, ("contiguous", "zigzag")):
        row = bal["rows"][layout]
        xs = range(len(row["pairs"]))
        a.bar([x - 0.2 for x in xs], share(row["flops"]), 0.38, color=BLUE, label="FLOPs (ring, fwd + bwd)")
        a.bar([x + 0.2 for x in xs], share(alone[f"4/{layout}"]["seconds"]), 0.38, color=ORANGE,
              label="CPU seconds (alone)")
        a.plot(xs, share(row["pairs"]), "_", color="black", markersize=24, mew=2, label="predicted: pairs")
        a.set(xlabel="rank", xticks=list(xs), title=f"{layout} split")
    ax[0].set_ylabel("share of the causal work")
    ax[0].legend(fontsize=8)
    fig.tight_layout()
    return fig, (f"N = 4, s = {bal['s']}, tiles {bal['tile']}: each rank's share of the (query, key) pairs "
                 "(predicted) and of what the checker measured beneath the ring")


@table("lab9_grade", "lab9")
def lab9_grade(r):
    g = need(r, "lab9", "grade")
    rows = [[name, "NOT RUN" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)]
            for name, value in g["checks"].items()]
    return (["check", "measured"], rows), f"`checker grade lab9 --solutions`: exit {g['exit']}, {g['checker_s']} s"
# ---------------------------------------------------------------- lab 10

@figure("lab10_drops", "lab10")
def lab10_drops(r):
    d = need(r, "lab10", "drops")
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for (skew, row), color in zip(d["percent_dropped"].items(), (BLUE, ORANGE, GREY)):
        ax.plot(d["factors"], row, "o-", color=color, label=f"router skew {skew}")
    ax.set(xlabel="capacity factor", ylabel="% of choices dropped")
    ax.legend()
    return fig, (f"keep_mask at C = ceil(factor T k / E), {d['tokens']} tokens, top-{d['k']} of {d['experts']}: even "
                 "routing drops nothing from factor 1.25; a skewed router needs a factor near its max/mean load")


@figure("lab10_balance", "lab10")
def lab10_balance(r):
    b = need(r, "lab10", "balance")
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for name, tr in b["traces"].items():
        ax.plot(tr, label=name, lw=1.2)
    ax.axhline(1.0, color="k", lw=0.5)
    ax.set(xlabel="step", ylabel="max / mean tokens per expert")
    ax.legend(fontsize=8)
    return fig, ("1024 fixed tokens, a skewed router, top-2 of 8: the bias (update_bias) converges slowly at small "
                 "gamma and oscillates at large; the aux loss alone, descended on the router, balances too")


@table("lab10_bytes", "lab10")
def lab10_bytes(r):
    b = need(r, "lab10", "bytes")
    if "rows" not in b:
        raise NotMeasured(b["not_run"])
    rows = [[str(x["world"]), str(x["rank"]), f"{x['predicted']:,}", f"{x['sent']:,}", f"{x['sent'] - x['predicted']}"]
            for x in b["rows"]]
    return (["ranks", "rank", "predicted from routing, B", "counted, B", "difference: the counts, B"], rows), \
        (f"expert_parallel forward, {b['tokens']} tokens a rank, h {b['hidden']}, top-{b['k']}, "
         f"{b['experts_per_rank']} experts a rank; counted beneath the all-to-alls")


@table("lab10_grade", "lab10")
def lab10_grade(r):
    g = need(r, "lab10", "grade")
    rows = [[name, "NOT RUN" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)]
            for name, value in g["checks"].items()]
    return (["check", "measured"], rows), f"`checker grade lab10 --solutions`: exit {g['exit']}, {g['checker_s']} s"
