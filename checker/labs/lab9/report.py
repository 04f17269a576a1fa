"""Lab 9's figures, measured with the checker's own instruments: what the lab's notebook plots and make bench keeps.

    python -m checker.spawn --nproc=4 -- python -m checker.labs.lab9.report --target solutions --out lab9.json

Four ranks: rings of N = 2 (two side by side) and of N = 4, then rank 0 alone.
A ring of N: what ring_attention keeps for backward on each rank at each length (measure.kept_bytes: the
storages its ops made that the autograd graph holds, the output aside); for the ring and for Ulysses, each rank's
rows of output and gradients against full attention (SDPA on the whole sequence) and the bytes each rank sends,
counted from its sends and collectives (labs.instruments.comm_bytes), beside the checker's formulas (formulas.py);
and, in the ring of 4, the matmul FLOPs of each rank's causal forward + backward (measure.FlopCounter), plain
and zig-zag split, beside the (query, key) pairs each rank sees (the prediction).
Alone: the same kept bytes for the textbook formula and for flash_attention on the whole sequence; and, for each
rank of a ring of N = 2 and 4, the CPU seconds its causal attention takes (its queries against the whole sequence
through flash.attend, best of REPEATS), plain and zig-zag split.
Rank 0 writes the JSON: {"1": alone, "2": the first ring of 2, "4": the ring of 4}. The code measured is the
learner's (`--target labs`) or the reference; every number is the checker's.
"""
from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

B, H, D = 1, 2, 16        # batch, heads, head dim of every measurement
LENGTHS = (256, 512, 1024, 2048)
TILE = 64                 # flash and ring tiles: 2048/4 = 512 rows per rank, 8 tiles
BALANCE_S = 2048          # sequence of the per-rank work figures: 8 tiles of 64 per rank at N = 4
REPEATS = 3
RANKS = (2, 4)            # the rings whose per-rank seconds one process measures


def pairs(s: int, n: int, layout: str) -> list[int]:
    """(query, key) pairs with key <= query that rank r's queries see, r = 0..n-1: the checker's own count."""
    import torch

    from checker.labs.lab9.measure import shard

    pos = torch.arange(s).view(1, 1, s)
    return [int((shard(pos, r, n, layout) + 1).sum()) for r in range(n)]


def one_process(seam, flash) -> dict:
    import torch

    from checker.labs.lab9.formulas import flash_bytes
    from checker.labs.lab9.measure import kept_bytes, shard

    gen = torch.Generator().manual_seed(9)
    memory = {"naive": [], "flash": [], "formula": [flash_bytes(B, H, s, D) for s in LENGTHS]}
    for s in LENGTHS:
        inputs = [torch.randn(B, H, s, D, generator=gen).requires_grad_() for _ in range(3)]
        naive = lambda q, k, v, s=s: torch.softmax(q @ k.transpose(-2, -1) / D ** 0.5 + torch.full(  # noqa: E731
            (s, s), float("-inf")).triu(1), -1) @ v  # the textbook formula, causal
        tiled = lambda q, k, v: seam.flash_attention(q, k, v, causal=True, block_q=TILE, block_k=TILE)  # noqa: E731
        for name, fn in (("naive", naive), ("flash", tiled)):
            memory[name].append(kept_bytes(fn, inputs)[0])
    q, k, v = (torch.randn(B, H, BALANCE_S, D, generator=gen) for _ in range(3))
    every = torch.arange(BALANCE_S)
    seconds = {}
    for n in RANKS:
        for layout in ("contiguous", "zigzag"):
            row = []
            for r in range(n):
                pos = shard(every.view(1, 1, -1), r, n, layout).flatten()
                best = float("inf")
                for _ in range(REPEATS):
                    t0 = time.process_time()
                    flash.attend(q[:, :, pos], k, v, pos, every, True, TILE, TILE)
                    best = min(best, time.process_time() - t0)
                row.append(round(best, 5))
            seconds[f"{n}/{layout}"] = {"seconds": row, "pairs": pairs(BALANCE_S, n, layout)}
    return {"world": 1, "shape": [B, H, D], "lengths": list(LENGTHS), "memory": memory,
            "balance": {"s": BALANCE_S, "tile": TILE, "rows": seconds}}


def ring_of(seam, comm, group, seed=9) -> dict:
    """This rank's measurements in a ring of the ranks of `group` (every rank of it calls this at once)."""
    import torch
    import torch.distributed as dist

    from checker.labs.lab9.formulas import flash_bytes, ring_bytes_expected, ulysses_bytes_expected
    from checker.labs.lab9.measure import FlopCounter, grads, kept_bytes, max_diff, sdpa, shard

    n, r = dist.get_world_size(group), dist.get_rank(group)
    gen = torch.Generator().manual_seed(seed)  # the same full tensors on every rank
    out = {"world": n, "shape": [B, H, D], "lengths": list(LENGTHS), "tile": TILE}
    ring = functools.partial(seam.ring_attention, causal=True, group=group, block=TILE)

    kept = []
    for s in LENGTHS:
        local = [shard(torch.randn(B, H, s, D, generator=gen), r, n, "zigzag").contiguous().requires_grad_()
                 for _ in range(3)]
        kept.append(kept_bytes(lambda q, k, v: ring(q, k, v, layout="zigzag"), local)[0])
    out["memory"] = {"ring": kept, "formula": [flash_bytes(B, H, s // n, D) for s in LENGTHS]}

    s = LENGTHS[1]
    full = [torch.randn(B, 2 * n, s, D, generator=gen) for _ in range(4)]  # 2N heads: Ulysses needs N | h
    want = [shard(w, r, n, "contiguous") for w in grads(sdpa(True), *full)]
    sent = {}
    for name, fn in (("ring", ring), ("ulysses", functools.partial(seam.ulysses_attention, causal=True, group=group))):
        leaves = [shard(t, r, n, "contiguous").contiguous().requires_grad_() for t in full[:3]]
        comm.start()
        o = fn(*leaves)
        fwd = comm.stop()
        comm.start()
        gs = torch.autograd.grad(o, leaves, shard(full[3], r, n, "contiguous"))
        bwd = comm.stop()
        sent[name] = {"forward": sum(x[2] for x in fwd), "backward": sum(x[2] for x in bwd),
                      "ops": sorted({x[0] for x in fwd + bwd}), "diff": max_diff([o.detach(), *gs], want)}
    formulas = {"ring": list(ring_bytes_expected(B, 2 * n, s, D, n)),
                "ulysses": [ulysses_bytes_expected(B, 2 * n, s, D, n)] * 2}

    flops = {}
    if n == max(RANKS):  # the per-rank work figure is the ring of 4's
        bal = [torch.randn(B, H, BALANCE_S, D, generator=gen) for _ in range(3)]
        for layout in ("contiguous", "zigzag"):
            local = [shard(t, r, n, layout).contiguous().requires_grad_() for t in bal]
            counter = FlopCounter()
            with counter.mode:
                o = ring(*local, layout=layout)
                o.backward(torch.ones_like(o))
            flops[layout] = counter.flops

    rows = [None] * n
    dist.all_gather_object(rows, {"kept": kept, "sent": sent, "flops": flops}, group=group)
    out["memory"]["ring"] = [row["kept"] for row in rows]  # [rank][length]
    out["bytes"] = {"shape": [B, 2 * n, s, D], **{k: {"per_rank": [row["sent"][k] for row in rows],
                                                      "formula": formulas[k]} for k in ("ring", "ulysses")}}
    if flops:
        out["balance"] = {"s": BALANCE_S, "tile": TILE, "rows": {layout: {
            "flops": [row["flops"][layout] for row in rows], "pairs": pairs(BALANCE_S, n, layout)}
            for layout in flops}}
    return out


def main(argv=None) -> None:
    import importlib

    import torch
    import torch.distributed as dist

    from checker import seams
    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("labs", "solutions"), default="labs")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    env = cdist.init(timeout_s=120)
    if env.world_size != max(RANKS):
        raise SystemExit(f"run on {max(RANKS)} ranks (python -m checker.spawn --nproc={max(RANKS)} -- ...)")
    comm = CommBytes()  # before the lab's code is imported: every spelling of a send is counted
    seam = seams.load("lab9", args.target)
    result = {"target": args.target}
    for n in RANKS:  # rings of n ranks side by side: ranks 0..n-1, n..2n-1, ...; the first one's figures kept
        groups = [dist.new_group(list(range(g, g + n))) for g in range(0, env.world_size, n)]
        got = ring_of(seam, comm, groups[env.rank // n])
        result[str(n)] = got
    comm.uninstall()
    if env.rank == 0:  # the others wait in teardown's barrier
        result["1"] = one_process(seam, importlib.import_module(f"{seams.module_name('lab9', args.target)}.flash"))
        Path(args.out).write_text(json.dumps(result))
    cdist.teardown()


if __name__ == "__main__":
    main()
