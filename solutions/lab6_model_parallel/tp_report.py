"""What tensor parallelism costs and saves, per rank: parameter bytes, activation bytes, all-reduces.

    torchrun --nproc_per_node 2 -m solutions.lab6_model_parallel.tp_report --out runs/lab6/tp.json
    torchrun --nproc_per_node 2 -m solutions.lab6_model_parallel.tp_report --config small --out runs/lab6/tp-small.json

Every rank builds the same unsharded model (same seed, dropout 0), runs one forward and backward of one
batch, then does the same with your `parallelize` and your `parallelize_dtensor`. Measured per rank:
    params        bytes of the tensors each rank holds (a DTensor's local shard), split layers vs the rest
    activations   bytes autograd saved for backward (labs.instruments.stage_probe.SavedTensorBytes), at their peak
    all-reduces   how many your layers launched, forward and backward, and of what size
    max diff      logits and loss against the unsharded model
What to expect at N=2 with tiny: the split layers' bytes halve (their row-parallel biases stay whole); the
activations fall by less than half, because LayerNorm inputs, the residual stream and the logits are
replicated on every rank (what sequence parallelism then shards).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model, get_config
from labs.instruments.collectives import CollectiveTimeline
from labs.instruments.stage_probe import SavedTensorBytes

from .tensor_parallel import parallelize
from .tp_dtensor import parallelize_dtensor


def nbytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def param_bytes(model) -> dict:
    split = sum(nbytes(p) for b in model.blocks for part in (b.attn, b.mlp) for p in part.parameters())
    return {"split_layers": split, "rest": sum(nbytes(p) for p in model.parameters()) - split}


def counter_for_dist(timeline: CollectiveTimeline):
    """Counts your layers' dist.all_reduce calls (the timeline wraps torch.distributed.all_reduce)."""
    def count(fn):
        timeline.start()
        result = fn()
        spans = timeline.stop()
        return result, len(spans), sorted({s.nbytes for s in spans})
    return count


def count_dtensor(fn):
    """DTensor's collectives are functional ops (c10d_functional.all_reduce), not dist.all_reduce calls:
    CommDebugMode, DTensor's own debugging tool, counts them."""
    from torch.distributed.tensor.debug import CommDebugMode
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook")  # CommDebugMode's own module hooks
        with CommDebugMode() as comm:
            result = fn()
    return result, comm.get_total_counts(), []


def measure(model, x, y, count, ref=None) -> dict:
    with SavedTensorBytes(model) as saved:
        (logits, loss), n_forward, sizes = count(lambda: model(x, y))
        activations = saved.now  # everything the forward saved for backward, still held
        _, n_backward, more = count(loss.backward)
    out = {"params": param_bytes(model), "activation_bytes": activations,
           "all_reduces": {"forward": n_forward, "backward": n_backward, "bytes_each": sorted(set(sizes + more))}}
    if ref is not None:
        out["max_diff"] = max((logits - ref[0]).abs().max().item(), abs(loss.item() - ref[1]))
    return out, (logits.detach(), loss.item())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=Path("runs/lab6/tp.json"))
    args = ap.parse_args(argv)
    env = cdist.init(args.device)
    count = counter_for_dist(CollectiveTimeline())

    cfg = dataclasses.replace(get_config(args.config), dropout=0.0)
    x, y = TokenFile.open(ensure_corpus(cfg.vocab_size)).batch(list(range(args.batch_size)), cfg.block_size, env.device)

    def fresh():
        torch.manual_seed(0)
        return build_model(cfg).to(env.device)

    report = {"config": args.config, "world_size": env.world_size, "batch": [args.batch_size, cfg.block_size]}
    report["unsharded"], ref = measure(fresh(), x, y, count)
    report["by_hand"], _ = measure(parallelize(fresh()), x, y, count, ref)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(env.device.type, (env.world_size,))
    report["dtensor"], _ = measure(parallelize_dtensor(fresh(), mesh), x, y, count_dtensor, ref)
    every = [None] * env.world_size
    dist.all_gather_object(every, report)
    if env.is_main:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"ranks": every}, indent=1))
        for name in ("unsharded", "by_hand", "dtensor"):
            r = report[name]
            p, a = r["params"], r["all_reduces"]
            diff = f"  max diff {r['max_diff']:.1e}" if "max_diff" in r else ""
            cdist.log(env, f"{name:9s} params {sum(p.values()) / 1e3:7.1f} KB (split layers "
                           f"{p['split_layers'] / 1e3:6.1f} KB)  activations {r['activation_bytes'] / 1e6:5.2f} MB  "
                           f"all-reduces fwd {a['forward']} bwd {a['backward']}{diff}")
    cdist.teardown()


if __name__ == "__main__":
    main()
