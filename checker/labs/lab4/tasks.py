"""Lab 4's worker side: the learner's job under an incident's conditions, measured (task_job); the course's faulty
jobs that make the forensics evidence (task_desync, task_linkprobe, task_memleak); the learner's analysers on that
evidence (task_forensics). The checks that read them are in checks.py and forensics.py."""
from __future__ import annotations

import os
import socket
import traceback
from pathlib import Path

from checker import seams
from checker.labs._common import CollectiveRecorder, digest, probe
from checker.labs._held_save import HeldSave
from checker.labs.lab4 import LAB, WORLD_SIZE
from checker.labs.lab4.course import course_module


def task_probe(ctx, target):
    return probe(LAB, target)


def _shard_cases(seam) -> list[dict]:
    """shard_indices at several sizes: lengths, range, distinct samples."""
    cases = []
    for n, world in ((49, 2), (48, 2), (100, 3), (101, 4), (7, 3)):
        shards = [list(map(int, seam.shard_indices(n, r, world))) for r in range(world)]
        flat = [i for s in shards for i in s]
        cases.append({"n": n, "world": world, "lengths": [len(s) for s in shards],
                      "in_range": all(0 <= i < n for i in flat), "distinct": len(set(flat)), "total": len(flat)})
    return cases


def _accum_case(train_step, device) -> dict:
    """Incident 8's contract on the side, after the job, on every rank: train_step on a fresh tiny GPT with lr 0 and
    the same 4 micro-batches everywhere; its .grad against the gradient of the micro-batches' mean loss, computed on
    an unwrapped copy. Eval mode (no dropout): both passes see the same numbers. The ranks' gradients are identical,
    so their average is each one (within rounding): the ratio of norms is 1.0, or k = 4 for a sum over micro-batches."""
    import copy

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import labs.common.dist as cdist
    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.model import build_model, get_config

    torch.manual_seed(0)
    model = build_model(get_config("tiny")).to(device).eval()
    ref = copy.deepcopy(model)
    data = TokenFile.open(ensure_corpus(256))
    micro = [data.batch([2 * i, 2 * i + 1], 64, device) for i in range(4)]
    train_step(DDP(model, device_ids=cdist.ddp_device_ids(device)), torch.optim.SGD(model.parameters(), lr=0.0), micro)
    (sum(ref(x, y)[1] for x, y in micro) / len(micro)).backward()
    got = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()])
    want = torch.cat([p.grad.flatten() for p in ref.parameters()])
    return {"k": len(micro), "ratio": float(got.norm() / want.norm()),
            "rel_diff": float((got - want).abs().max() / want.abs().max())}


def task_job(ctx, target, job, on_saved_cue=False, parts=(), after_weights=False):
    """The learner's job.run under this run's conditions; what the checker measures, per rank. `parts`: seam
    functions rank 0 also checks on the side first (each fails alone), so they cost no process of their own;
    "accum" (incident 8), train_step's gradient checked on every rank after the job (_accum_case).
    on_saved_cue (incident 5, a job that saves at save_at and every save_every steps after): the first checkpoint
    completes, the second is killed while rank 0 writes the weights (_held_save.py: half the file, then the kill); with
    after_weights, killed instead inside the first write after the weights' file is complete, on the rank that makes
    it (none where the weights' file is the save's last: the kill then lands after the save, every rank waiting for it
    in the checker's callback, so no later save is taken for this one)."""
    import time

    import torch
    import torch.distributed as dist

    rec = CollectiveRecorder()  # before learner code is imported: counts every dist.all_reduce
    out = ctx.partial
    held = None
    if on_saved_cue:  # before learner code is imported too; before job.run seeds, so no draw of the run's is taken
        from labs.common.model import build_model, get_config
        # a file of at least half the weights' bytes holds the weights; a rank's RNG file is ~20 KB of 480 KB
        weights = sum(p.numel() * p.element_size() for p in build_model(get_config("tiny")).parameters())
        held = HeldSave(ctx, out, min_bytes=weights // 2, together=False,
                        cue="saved_after" if after_weights else "saved", after=after_weights)
    seam = seams.load(LAB, target)
    if int(os.environ.get("RANK", 0)) == 0:
        if "shards" in parts:
            out["shards"], out["shards_error"] = ctx.attempt(lambda: _shard_cases(seam))
        if "launch_args" in parts:
            out["launch_args"], out["launch_args_error"] = ctx.attempt(lambda: list(seam.launch_args(WORLD_SIZE)))
    timers = {"after_step": 0.0, "train_step": 0.0}
    tokens = {"after_step": 0, "train_step": 0}  # token positions the model ran forward inside each
    started: list[bool] = []
    phase: list[str] = []
    hooked: set[int] = set()

    def on_forward(module, args):
        if phase and args:
            tokens[phase[-1]] += args[0].numel()  # (batch, seq) token ids

    def count_tokens(model):
        if id(model) not in hooked:
            hooked.add(id(model))
            model.register_forward_pre_hook(on_forward)

    def timed(name):
        def wrap(fn):
            def wrapper(*a, **k):
                if not started:  # count from the first training step on (not the job's link check)
                    started.append(True)
                    rec.start()
                count_tokens(getattr(a[0], "module", a[0]))  # train_step gets the DDP wrapper, after_step the model
                phase.append(name)
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    timers[name] += time.perf_counter() - t0
                    phase.pop()
            return wrapper
        return wrap

    unwrapped_train_step = seam.train_step
    for name in timers:  # through the seam: every module of the learner's package that holds the function
        seams.wrap(seam, name, timed(name))

    def saved():
        if held is not None and "complete_at" not in out:  # the first checkpoint: complete, what a resume gets
            out["complete_at"], out["rank"] = job["save_at"], dist.get_rank()
            ctx.write(out)  # a rank the kill finds in the learner's barrier reports no more
            held.armed = True  # the next torch.save of the weights is cut in half and the run killed inside it
            return
        out["saved"], out["held"] = True, False  # no write held in this save: the kill lands after it
        ctx.write(out)
        dist.barrier()  # every rank has reported before rank 0 cues the kill
        ctx.cue(held.cue)
        # and every rank waits for it here: a job that trained on could reach its next save before a late kill on a
        # loaded machine, and that save's writes (held, or complete) would be taken for this one's
        time.sleep(3600)

    try:
        res = seam.run(seam.Job(**job), on_saved=saved if on_saved_cue else None)
    except BaseException:
        traceback.print_exc()  # into the run's log, as torchrun would show it
        raise
    calls = rec.stop()
    model = res.pop("model")
    env = res.pop("env")
    params = sum(p.numel() for p in model.parameters())
    out.update(res)
    out.update(world_size=env.world_size, rank=env.rank, digest=digest(model.named_parameters()),
               finite=all(bool(torch.isfinite(p).all()) for p in model.parameters()), params=params,
               reduced_numel=sum(n for _, n in calls), timers=timers, tokens=tokens,
               losses=[float(x).hex() for x in res["losses"]],
               ifname=os.environ.get("GLOO_SOCKET_IFNAME"), nccl_ifname=os.environ.get("NCCL_SOCKET_IFNAME"),
               interfaces=[n for _, n in socket.if_nameindex()])
    if "accum" in parts:
        out["accum"], out["accum_error"] = ctx.attempt(lambda: _accum_case(unwrapped_train_step, env.device))
    import labs.common.dist as cdist
    cdist.teardown()
    return out


def task_desync(ctx, target, case, out):
    """The course's faulty job (desync.py, never the graded tree's) on every rank, its flight recorder dumped into
    `out`; the faulty rank also returns where it diverged (the answer key). No learner code is imported here."""
    desync = course_module("desync")
    res = desync.train(desync.Case(**case), Path(out))
    import labs.common.dist as cdist
    cdist.teardown(timeout_s=5)
    return res


def task_linkprobe(ctx, target, out, slow_rank, rate_gbps):
    """The course's link probe (linkprobe.py) on every rank, one rank's link slowed; no learner code here."""
    probe = course_module("linkprobe")
    path = probe.probe(Path(out), slow_rank, rate_gbps)
    import labs.common.dist as cdist
    cdist.teardown(timeout_s=5)
    return {"trace": path}


def task_memleak(ctx, target, cases, out):
    """The course's leaking training loop (memleak.py, never the graded tree's), one snapshot per case pickled into
    `out`, with the answer key: the line the kept tensors are allocated at, and the bytes a step keeps (measured
    apart from the recording). No learner code is imported here."""
    memleak = course_module("memleak")
    from labs.instruments.memory_history import save

    keys = {}
    for case in cases:
        c = memleak.Case(**case)
        save(memleak.train(c), Path(out) / f"{c.kind}.pickle")
        keys[c.kind] = {"file": memleak.__file__, "line": memleak.leak_line(c.kind),
                        "bytes_per_step": memleak.saved_bytes(c), "steps": c.steps}
    return {"keys": keys}


def task_forensics(ctx, target, cases, traces, netns_traces=(), snapshots=None):
    """The learner's analysers on the evidence the checker made: find_desync on each case's dumps, slow_rank on the
    link probe's traces (emulated link; real link), find_memory_leak on each memory snapshot (of `source`); each
    call on its own (one that raises fails alone)."""
    seam = seams.load(LAB, target)

    def call(fn, paths):
        answer, err = ctx.attempt(lambda: fn(list(paths)))
        return {"answer": answer if isinstance(answer, dict) else {"returned": repr(answer)[:200]}, "error": err}

    out = {"answers": {name: call(seam.find_desync, paths) for name, paths in cases.items()}}
    if traces:
        out["slow_rank"] = call(seam.slow_rank, traces)
    if netns_traces:
        out["slow_rank_netns"] = call(seam.slow_rank, netns_traces)
    if snapshots:
        from labs.instruments.memory_history import load

        def leak(path):
            answer, err = ctx.attempt(lambda: seam.find_memory_leak(load(path), snapshots["source"]))
            ok = answer is None or isinstance(answer, dict)
            return {"answer": answer if ok else {"returned": repr(answer)[:200]}, "error": err}
        out["memory"] = {kind: leak(path) for kind, path in snapshots["paths"].items()}
        out["snapshots"] = snapshots["paths"]  # the evaluator reads the line a learner named there
    return out


TASKS = {"probe": task_probe, "job": task_job, "desync": task_desync, "linkprobe": task_linkprobe,
         "memleak": task_memleak, "forensics": task_forensics}
