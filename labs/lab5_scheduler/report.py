# GENERATED from solutions/lab5_scheduler/report.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""The scaling report: tokens/s and scaling efficiency against world size, from the metrics CSV.

    python -m labs.lab5_scheduler.report --csv runs/lab5/metrics.csv --out runs/lab5/report

This is weak scaling: each rank keeps its batch (train.py's --batch-size is per rank), so N ranks
process N times the tokens per step. Efficiency 1.0 means every added rank paid for itself; what
the ideal is, and so the formula, is the README's derivation. What eats the difference: the
gradient all-reduce, the ranks waiting for the slowest one, and on one machine, ranks sharing
cores and memory bandwidth.
"""
from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path


def scaling_table(rows: list[dict]) -> list[dict]:
    """One entry per world size (ascending): median tokens/s over its COMPLETED jobs, the jobs it came
    from, speedup and efficiency against the smallest world size measured (normally 1)."""
    raise NotImplementedError("TODO(lab5): One entry per measured world size, ascending: the median tokens/s over that "
                              "size's COMPLETED jobs with a rate (one noisy job cannot move a median), their job ids, "
                              "the speedup over the smallest size measured (the base, normally 1 rank), and the "
                              "efficiency: the measured rate as a fraction of the ideal weak-scaling rate at that "
                              "size, the ideal extrapolated from the base (the checker recomputes it within 0.01). No "
                              "completed job: an empty list. (hints: checker hint lab5 report.scaling_table)")


def markdown(table: list[dict]) -> str:
    lines = ["| world size | tokens/s | speedup | efficiency | jobs |", "|---:|---:|---:|---:|---|"]
    for t in table:
        lines.append(f"| {t['world_size']} | {t['tokens_per_s']:,.0f} | {t['speedup']:.2f}x | "
                     f"{t['efficiency']:.0%} | {', '.join(t['jobs'])} |")
    return "\n".join(lines) + "\n"


def plot(table: list[dict], path: str | Path, title: str = "weak scaling, tiny GPT, CPU + gloo") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [t["world_size"] for t in table]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot(sizes, [t["tokens_per_s"] for t in table], "o-", label="measured")
    # the ideal as your table implies it (measured / efficiency): a wrong efficiency draws a wrong ideal
    a.plot(sizes, [t["tokens_per_s"] / t["efficiency"] if t["efficiency"] else float("nan") for t in table], "--",
           color="grey", label="ideal (your efficiency's)")
    a.set(xlabel="world size (ranks)", ylabel="tokens/s", title="throughput", xticks=sizes, ylim=(0, None))
    a.legend()
    b.bar([str(s) for s in sizes], [t["efficiency"] for t in table], color="tab:green")
    b.axhline(1.0, ls="--", color="grey")
    for i, t in enumerate(table):
        b.text(i, t["efficiency"], f"{t['efficiency']:.0%}", ha="center", va="bottom")
    b.set(xlabel="world size (ranks)", ylabel="efficiency", title="scaling efficiency",
          ylim=(0, max(1.15, max(t["efficiency"] for t in table) + 0.15)))  # room for a label above a bar > 100%
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(csv_path: str | Path, out: str | Path) -> tuple[Path, Path]:
    """scaling.png and scaling.md in `out`, from the metrics CSV; returns their paths."""
    with open(csv_path, newline="") as f:
        table = scaling_table(list(csv.DictReader(f)))
    if len(table) < 2:
        raise ValueError(f"{csv_path}: a scaling curve needs completed jobs at 2 or more world sizes, "
                         f"found {[t['world_size'] for t in table]}")
    out = Path(out)
    png = plot(table, out / "scaling.png")
    md = out / "scaling.md"
    md.write_text(markdown(table))
    return png, md


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default="runs/lab5/metrics.csv")
    ap.add_argument("--out", default="runs/lab5/report")
    args = ap.parse_args(argv)
    png, md = write_report(args.csv, args.out)
    print(md.read_text(), f"\nplot: {png}")


if __name__ == "__main__":
    main()
