"""Lab 4's and lab 6's measured figures for make bench: ~35 s on 2 cores, 2 ranks on gloo.

    python -m bench.lab_figures     # measure only these, merge them into bench/results.json, rewrite RESULTS.md
    python -m bench.run             # (make bench) measures them along with everything else

lab4.slow_link        all-reduce time vs size over incident 8's emulated link (scenarios.py: 0.01 GB/s + 2 ms),
                      by lab 4's bandwidth.py; the real link's curve is bench's "allreduce"
lab4_forensics        lab 4's desync.py (extra, behind) and linkprobe.py at the public variant: each rank's last
                      flight-recorder entries, find_desync's answer beside the injected fault, pair rates
lab6.pipeline         lab 6's pp_timeline.py: the bubble of GPipe and 1F1B vs (p-1)/(m+p-1) on stages that
                      sleep 15 ms forward / 30 ms backward (the least idle of 3 steps), one timeline per
                      schedule at m = 4, and the activations autograd holds at peak on each GPT stage at m = 8
lab6.tensor_parallel  lab 6's tp_report.py, rank 0: parameter and activation bytes, all-reduces per step
Each section carries its own measured_at: `python -m bench.lab_figures` refreshes them without re-running
the rest, so the slides' captions say when each figure was taken.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent
TIMELINE_M, GPT_M = 4, 8


def _torchrun(module: str, *args: str) -> dict:
    """Run `module` on 2 ranks with `--out PATH` appended; return what rank 0 wrote there."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "-m", module, *args, "--out", f"{d}/out.json"], check=True, capture_output=True)
        return json.loads(Path(f"{d}/out.json").read_text())


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def lab4_figures() -> dict:
    from solutions.lab4_debugging.scenarios import scenario
    job = scenario(8).job  # the link incident 8 runs over: the figure shows what the learner met
    gbps, latency_ms = job["link_gbps"], job["link_latency_ms"]
    r = _torchrun("solutions.lab4_debugging.bandwidth", "--emulate-rate-gbps", str(gbps),
                  "--emulate-latency-ms", str(latency_ms), "--max-bytes", "1M", "--repeats", "3")
    return {"slow_link": {"rate_GBps": gbps, "latency_ms": latency_ms, "world_size": r["world_size"],
                          "backend": r["backend"], "rows": r["rows"],
                          "micro_batches": job["micro_batches"]},
            "measured_at": _now()}


def lab4_forensics() -> dict:
    """Lab 4's forensics evidence, public variant: each rank's last flight-recorder entries for two faulty jobs of
    desync.py, the reference find_desync's answer beside the injected fault, and linkprobe.py's pair rates."""
    import pickle
    import statistics

    from solutions.lab4_debugging import desync, linkprobe
    from solutions.lab4_debugging.forensics import find_desync, probe_spans, slow_rank
    out = {"desync": {}, "measured_at": _now()}
    with tempfile.TemporaryDirectory() as d:
        for kind in ("extra", "behind"):
            folder = Path(d) / kind
            subprocess.run([sys.executable, "-m", "solutions.lab4_debugging.desync", kind, "--out", str(folder)],
                           check=True, capture_output=True, timeout=180)
            paths = [str(folder / f"rank{r}") for r in range(desync.WORLD)]
            answer, truth = find_desync(paths), json.loads((folder / "truth.json").read_text())
            ranks = {}
            for r, p in enumerate(paths):
                entries = pickle.loads(Path(p).read_bytes())["entries"]
                ranks[r] = [{"seq": e["collective_seq_id"], "op": e["profiling_name"].split(":")[-1],
                             "sizes": e["input_sizes"], "dtypes": e["input_dtypes"]}
                            for e in entries if e["collective_seq_id"] >= truth["seq"] - 2]
            out["desync"][kind] = {"answer": answer, "truth": truth, "ranks": ranks}
        slow, rate = linkprobe.rates(0)
        link = Path(d) / "link"
        subprocess.run([sys.executable, "-m", "solutions.lab4_debugging.linkprobe", "--out", str(link)],
                       check=True, capture_output=True, timeout=180)
        traces = [str(link / f"trace_rank{r}.json") for r in range(linkprobe.WORLD)]
        pairs: dict[str, list[float]] = {}
        for t in traces:
            for src, dst, nbytes, seconds in probe_spans(t):
                pairs.setdefault("-".join(map(str, sorted((src, dst)))), []).append(nbytes / seconds / 1e9)
        out["link_probe"] = {"slow_rank": slow, "rate_GBps": rate, "nbytes": linkprobe.NBYTES,
                             "pairs": {k: round(statistics.median(v), 5) for k, v in sorted(pairs.items())},
                             "answer": slow_rank(traces)}
        from solutions.lab4_debugging.slowlink import netns_available
        if netns_available()[0]:  # root: the same probe over a real tbf-shaped cable (slowlink.Star)
            slow, mbit = linkprobe.netns_rates(0)
            real = Path(d) / "real"
            subprocess.run([sys.executable, "-m", "solutions.lab4_debugging.linkprobe", "--slow-rank", str(slow),
                            "--netns-rate-mbit", str(mbit), "--out", str(real)], check=True, capture_output=True,
                           timeout=180)
            traces = [str(real / f"trace_rank{r}.json") for r in range(linkprobe.WORLD)]
            out["link_probe_netns"] = {"slow_rank": slow, "rate_mbit": mbit, "answer": slow_rank(traces)}
    return out


def _rel(events: list[dict], t0: float) -> list[dict]:
    return [{"kind": e["kind"], "mb": e["mb"], "start_ms": round(1e3 * (e["start"] - t0), 2),
             "end_ms": round(1e3 * (e["end"] - t0), 2)} for e in events]


def lab6_figures() -> dict:
    from labs.instruments.schedule_timeline import bubble_fraction, ideal_bubble, window
    ms = [1, 2, 4, 8, 16]
    pp = _torchrun("solutions.lab6_model_parallel.pp_timeline", "--micro-batches", *map(str, ms),
                   "--repeats", "3", "--gpt-m", str(GPT_M))
    p, sleep = pp["p"], pp["sleep"]
    bubble = [{"m": m, "formula": round(ideal_bubble(p, m), 4),
               **{s: round(bubble_fraction(sleep[s][str(m)]), 4) for s in sleep}} for m in ms]
    timeline = {}
    for s in sleep:
        ranks = sleep[s][str(TIMELINE_M)]
        t0 = window(ranks)[0]
        timeline[s] = [_rel(r, t0) for r in ranks]
    tp = _torchrun("solutions.lab6_model_parallel.tp_report")["ranks"][0]
    return {"pipeline": {"p": p, "forward_ms": 1e3 * pp["forward_s"], "backward_ms": 1e3 * pp["backward_s"],
                         "bubble": bubble, "timeline_m": TIMELINE_M, "timeline": timeline, "gpt_m": GPT_M,
                         "activation_peak_bytes": {s: g["peak_bytes"] for s, g in pp["gpt"].items()}},
            "tensor_parallel": {"config": tp["config"], "world_size": tp["world_size"], "batch": tp["batch"],
                                **{k: {"params": sum(tp[k]["params"].values()),
                                       "split_layer_params": tp[k]["params"]["split_layers"],
                                       "activation_bytes": tp[k]["activation_bytes"],
                                       "all_reduces_forward": tp[k]["all_reduces"]["forward"],
                                       "all_reduces_backward": tp[k]["all_reduces"]["backward"]}
                                   for k in ("unsharded", "by_hand", "dtensor")},
                                "all_reduce_bytes": (tp["by_hand"]["all_reduces"]["bytes_each"] or [None])[0]},
            "measured_at": _now()}


def markdown(results: dict) -> list[str]:
    """RESULTS.md's lines for these sections (none for a section not measured)."""
    lines = []
    link = results.get("lab4", {}).get("slow_link")
    if link:
        lines += ["", f"Lab 4, all-reduce over incident 8's emulated link ({link['rate_GBps']} GB/s + "
                      f"{link['latency_ms']} ms per call), {link['world_size']} ranks:", "",
                  "| bytes | ms | busbw GB/s |", "|---|---|---|"]
        lines += [f"| {r['bytes']:,} | {r['ms']} | {r['busbw_GBps']} |" for r in link["rows"]]
    pp = results.get("lab6", {}).get("pipeline")
    if pp:
        lines += ["", f"Lab 6, pipeline bubble, p = {pp['p']}, stages sleeping {pp['forward_ms']:g} ms forward + "
                      f"{pp['backward_ms']:g} ms backward (least idle of 3 steps):", "",
                  "| m | (p-1)/(m+p-1) | GPipe | 1F1B |", "|---|---|---|---|"]
        lines += [f"| {b['m']} | {b['formula']:.3f} | {b['gpipe']:.3f} | {b['1f1b']:.3f} |" for b in pp["bubble"]]
        act = pp["activation_peak_bytes"]
        lines += ["", f"Activations held at peak per stage, `tiny` GPT, m = {pp['gpt_m']}: GPipe "
                  + " / ".join(f"{b / 1e6:.2f}" for b in act["gpipe"]) + " MB, 1F1B "
                  + " / ".join(f"{b / 1e6:.2f}" for b in act["1f1b"]) + " MB."]
    tp = results.get("lab6", {}).get("tensor_parallel")
    if tp:
        u, h = tp["unsharded"], tp["by_hand"]
        lines += ["", f"Lab 6, tensor parallel, `{tp['config']}`, {tp['world_size']} ranks, batch "
                      f"{tp['batch'][0]} x {tp['batch'][1]}, per rank: parameters {u['params']:,} -> "
                      f"{h['params']:,} B, "
                      f"saved activations {u['activation_bytes']:,} -> {h['activation_bytes']:,} B, all-reduces "
                      f"{h['all_reduces_forward']} forward + {h['all_reduces_backward']} backward of "
                      f"{tp['all_reduce_bytes']:,} B."]
    return lines


def main() -> None:
    from .run import OUT as RUN_OUT
    from .run import write_markdown
    path = RUN_OUT / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["lab4"] = lab4_figures()
    results["lab4_forensics"] = lab4_forensics()
    results["lab6"] = lab6_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    if "models" in results:  # a full bench has run: RESULTS.md can be rewritten from the merged file
        print(write_markdown(results))
    else:
        print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
