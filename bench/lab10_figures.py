"""Lab 10's measured figures for make bench: drops against the capacity factor, a skewed router balanced by the
bias and by the aux loss, the all-to-all bytes of expert parallelism against the prediction, and a grade.

    python -m bench.lab10_figures   # measure only these, merge them into bench/results.json (and .md)
    python -m bench.run             # (make bench) measures them along with everything else

lab10.drops    solutions/lab10_moe: % of choices dropped by keep_mask at each capacity factor, 1024 tokens, top-2
               of 8, three router skews (the same seeds as the notebook's section 2).
lab10.balance  max/mean tokens per expert of 1024 fixed tokens under a skewed router: frozen, update_bias at three
               gammas, the aux loss alone descended on the router (the notebook's section 3).
lab10.bytes    solutions/lab10_moe/expert_parallel.py on 2 and 4 ranks: each rank's forward bytes counted beneath
               the all-to-alls against the prediction from its routing.
lab10.grade    `checker grade lab10 --solutions`: every check's value and the runs' seconds.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
SKEWS = (0.0, 1.0, 3.0)
GAMMAS = (0.001, 0.005, 0.02)
STEPS, T, E, K = 150, 1024, 8, 2
LINE = re.compile(r"rank (\d+): EP vs one process (\S+); sent ([\d,]+) B forward, predicted ([\d,]+) B")


def drops() -> dict:
    import torch

    from solutions.lab10_moe import capacity, keep_mask, route

    rows = {}
    for skew in SKEWS:
        torch.manual_seed(1)
        ids, _ = route(torch.randn(T, E) + torch.linspace(skew, 0, E), K)
        rows[str(skew)] = [round(100 * (1 - keep_mask(ids, E, capacity(T, K, E, f)).float().mean().item()), 2)
                           for f in FACTORS]
    return {"factors": list(FACTORS), "percent_dropped": rows, "tokens": T, "experts": E, "k": K}


def balance() -> dict:
    import torch

    from solutions.lab10_moe import load_balancing_loss, route, update_bias

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, 16, generator=gen)
    x[:, 0] = 1.0  # a constant feature: its router column is a per-expert offset
    router = torch.randn(E, 16, generator=gen) * 0.3
    router[:, 0] += torch.linspace(1.0, 0, E)

    def ratio(ids):
        c = torch.bincount(ids.flatten(), minlength=E).float()
        return round((c.max() / c.mean()).item(), 4), c.long()

    traces = {}
    for gamma in (0.0, *GAMMAS):
        bias, tr = torch.zeros(E), []
        for _ in range(STEPS):
            r, c = ratio(route(x @ router.t(), K, bias)[0])
            tr.append(r)
            update_bias(bias, c, gamma)
        traces["frozen" if gamma == 0 else f"bias, gamma {gamma}"] = tr
    w, tr = router.clone().requires_grad_(), []
    opt = torch.optim.SGD([w], lr=1.0)
    for _ in range(STEPS):
        scores = x @ w.t()
        ids, _ = route(scores, K)
        tr.append(ratio(ids)[0])
        opt.zero_grad()
        load_balancing_loss(torch.softmax(scores, -1), ids, E).backward()
        opt.step()
    traces["aux loss alone, SGD lr 1"] = tr
    return {"traces": traces, "steps": STEPS}


def a2a_bytes() -> dict:
    rows = []
    for n in (2, 4):
        r = subprocess.run([sys.executable, "-m", "checker.spawn", f"--nproc={n}", "--", sys.executable, "-m",
                            "solutions.lab10_moe.expert_parallel"], capture_output=True, text=True, timeout=300)
        if r.returncode:
            return {"not_run": f"expert_parallel on {n} ranks failed: {(r.stdout + r.stderr)[-300:]}"}
        rows += sorted([{"world": n, "rank": int(m[1]), "sent": int(m[3].replace(",", "")),
                         "predicted": int(m[4].replace(",", ""))} for m in LINE.finditer(r.stdout)],
                       key=lambda x: x["rank"])
    return {"rows": rows, "tokens": 64, "hidden": 16, "k": 2, "experts_per_rank": 2}


def lab10_figures() -> dict:
    from bench.run import grade_time

    return {"drops": drops(), "balance": balance(), "bytes": a2a_bytes(), "grade": grade_time("lab10"),
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(results: dict) -> list[str]:
    lab10 = results.get("lab10")
    if not lab10:
        return []
    d = lab10["drops"]
    lines = ["", f"Lab 10, % of choices dropped by capacity ({d['tokens']} tokens, top-{d['k']} of {d['experts']}):",
             "", "| router skew | " + " | ".join(f"factor {f}" for f in d["factors"]) + " |",
             "|---|" + "---|" * len(d["factors"])]
    lines += [f"| {s} | " + " | ".join(f"{x:.1f}" for x in row) + " |" for s, row in d["percent_dropped"].items()]
    lines += ["", "Lab 10, balancing a skewed router (max/mean tokens per expert, first step -> worst of the last 20): "
              + "; ".join(f"{name} {tr[0]:.2f} -> {max(tr[-20:]):.2f}"
                          for name, tr in lab10["balance"]["traces"].items())
              + "."]
    b = lab10["bytes"]
    if "rows" in b:
        lines += ["", "Lab 10, expert parallelism's forward bytes per rank (64 tokens, h 16, top-2, 2 experts a rank): "
                  + "; ".join(f"N={r['world']} rank {r['rank']}: {r['sent']:,} B counted, {r['predicted']:,} B "
                              "predicted + counts" for r in b["rows"]) + "."]
    else:
        lines += ["", f"Lab 10 bytes not measured: {b['not_run']}."]
    g = lab10["grade"]
    lines += ["", f"`checker grade lab10 --solutions`: exit {g['exit']}, {g['checker_s']} s."]
    lines += [f"- lab 10, {k}: {v}" for k, v in g["info"].items()]
    return lines


def main() -> None:
    from bench.run import write_markdown

    path = Path(__file__).resolve().parent / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["lab10"] = lab10_figures()
    path.write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results)  # bench/RESULTS.md, every section
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
