"""Lab 2's worker side: the sharding and bucket-layout run, the correctness run (equivalence, sync, no_sync, overlap's
timestamps), the differential step, the throughput windows and the killed-and-resumed training runs. Every number it
returns is measured here, next to the learner's code; checks.py decides."""
from __future__ import annotations

import copy
from contextlib import nullcontext

from checker import seams
from checker.labs import _crosscheck
from checker.labs._common import CollectiveRecorder, digest, probe, take_turn, tiny_model
from checker.labs._held_save import HeldSave
from checker.labs.lab2 import (
    BATCH,
    LAB,
    SEQ,
    STEP_PLAN,
    THROUGHPUT_STEPS,
    THROUGHPUT_WINDOWS,
    TOL,
    TRAIN_LOSS_RTOL,
    TRAIN_WHY,
)

SMALL_BUCKET_MB = 0.05      # tiny's 0.48 MB of gradients -> 7 buckets, so overlap is visible
TAIL_BUCKET_MB = 0.1        # -> 3 full buckets and a last one of 82 KB left over (at 0.05 the last closes exactly)
PG_TIMEOUT_S = 20  # a graded run's collectives: each takes milliseconds (tiny's 0.48 MB over loopback), so a peer
#                    20 s late never comes (a collective skipped on one rank): the run ends there, within a minute
TURNS_PG_TIMEOUT_S = 90  # a throughput run's: its other ranks wait for rank 0 in a barrier while rank 0 waits for its
#                          turn, the first time until the other run has started and warmed up (its budget bounds it)


def _data():
    from labs.common.data import TokenFile, ensure_corpus

    return TokenFile.open(ensure_corpus(256))


def task_probe(ctx, target):
    return probe(LAB, target)


def _sampler_ids(mod, n, b, world):
    """Every rank's ids across two epoch ends with a ragged tail (100 windows are not a multiple of 8 or 12),
    compared in the checker with the reference's own run's: whatever a learner does with the tail, it must be what
    DDP's equivalence needs, the global batch of BatchSampler split in rank order."""
    samplers = [mod.ShardedSampler(n, b, r, world, seed=5) for r in range(world)]
    return [[list(map(int, s.next_ids())) for _ in range(2 * (n // (b * world)) + 3)] for s in samplers]


def task_sharding_ref(ctx, target):
    """The reference's ids for the same samplers, in a run that never imports the learner's code."""
    ref = seams.load(LAB, "solutions")
    return {f"w{world}": {"ids": _sampler_ids(ref, 100, 4, world)} for world in (2, 3)}


def _layout(params, cap: float) -> list[list[int]]:
    """The checker's own bucket layout (indices into params): reversed, one open bucket per dtype, closed once its
    bytes reach the cap; the buckets still open at the end last, in the order their dtype was last filled."""
    buckets, open_ = [], {}
    for i in reversed(range(len(params))):
        current, size = open_.pop(params[i].dtype, ([], 0))
        current.append(i)
        size += params[i].numel() * params[i].element_size()
        if size >= cap:
            buckets.append(current)
        else:
            open_[params[i].dtype] = (current, size)
    return buckets + [current for current, _ in open_.values()]


def _layout_cases():
    """(name, params, cap): tiny's fp32 parameters at 0.1 MB and at a cap its reversed sizes hit exactly, and a
    copy with every third parameter in bf16 (a bucket's buffer has one dtype)."""
    import torch

    params = [p.detach() for p in tiny_model(seed=3).parameters()]
    sizes = [p.numel() * p.element_size() for p in reversed(params)]
    exact = sum(sizes[:3])  # the third parameter from the end closes the first bucket exactly at the cap
    mixed = [p.to(torch.bfloat16) if i % 3 == 1 else p for i, p in enumerate(params)]
    return [("fp32, 0.1 MB", params, 0.1 * 2**20), (f"fp32, {exact:,} B (3 parameters' bytes)", params, exact),
            ("fp32 and bf16, 0.05 MB", mixed, 0.05 * 2**20)]


def task_sharding(ctx, target):
    seam = seams.load(LAB, target)
    out = {}

    def layouts():
        rows = []
        for name, params, cap in _layout_cases():
            index = {id(p): i for i, p in enumerate(params)}
            got = [[index.get(id(p), -1) for p in b.params] for b in seam.BucketedDDP._make_buckets(params, cap)]
            rows.append({"case": name, "yours": got, "want": _layout(params, cap)})
        return rows
    out["layout"], out["layout_error"] = ctx.attempt(layouts)
    for world in (2, 3):
        def one(world=world):
            n, b = 100, 4
            ranks = [seam.ShardedSampler(n, b, r, world, seed=5) for r in range(world)]
            per_epoch = n // (b * world)
            epoch0 = [[list(map(int, s.next_ids())) for _ in range(per_epoch)] for s in ranks]
            ids = [i for rank in epoch0 for batch in rank for i in batch]
            sizes_ok = all(len(batch) == b for rank in epoch0 for batch in rank)
            next_epoch = [list(map(int, s.next_ids())) for s in ranks]
            resumed = seam.ShardedSampler(n, b, 0, world, seed=5)
            resumed.load_state_dict(ranks[0].state_dict())
            resumes = all(list(resumed.next_ids()) == list(ranks[0].next_ids()) for _ in range(3))
            ranks[0].set_epoch(0)
            return {"unique": len(set(ids)), "seen": len(ids), "expected": per_epoch * b * world,
                    "ids": _sampler_ids(seam, n, b, world), "tail": n % (b * world),
                    "sizes_ok": sizes_ok, "reshuffled": next_epoch[0] != epoch0[0][0],
                    "set_epoch": list(map(int, ranks[0].next_ids())) == epoch0[0][0], "resumes": resumes}
        out[f"w{world}"], out[f"w{world}_error"] = ctx.attempt(one)
    return out


def _equivalence(ctx, seam, rec, make, env, name, steps=3):
    """Wrapped model on N ranks vs rank 0's copy trained alone on the concatenated global batch."""
    import torch
    import torch.distributed as dist

    data, rank, world = _data(), env.rank, env.world_size
    model = tiny_model(seed=100 + rank).to(env.device)        # different on purpose: broadcast must fix it
    ref = copy.deepcopy(model) if rank == 0 else None      # rank 0's initial weights are the truth
    ddp = make(model)
    # SGD, not AdamW: Adam divides by sqrt(v), which turns rounding noise in near-zero gradients into
    # lr-sized weight differences; SGD's weights differ exactly as much as the gradients do.
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1) if ref is not None else None
    res = {"grad_diff": [], "param_diff": [], "in_sync": [], "bytes_in_backward": [], "bytes": [], "calls": [],
           "comm_s": [], "hidden_s": [], "exposed_s": []}
    for s in range(steps):
        ids = range(s * BATCH * world, (s + 1) * BATCH * world)
        x, y = data.batch(list(ids)[rank * BATCH:(rank + 1) * BATCH], SEQ, env.device)
        opt.zero_grad(set_to_none=True)
        rec.start(env.device)  # marks on the device's clock on a GPU (labs/instruments/collectives.py)
        _, loss = ddp(x, y)
        t_forward_end = rec.now()
        loss.backward()
        t_backward_end = rec.now()
        ddp.finish_gradient_synchronization()
        t_finished = rec.now()
        calls = rec.stop()
        t_forward_end, t_backward_end, t_finished = map(rec.seconds, (t_forward_end, t_backward_end, t_finished))
        hidden, comm = rec.overlap([(t_forward_end, t_backward_end)])  # all-reduce time during backward's compute
        res["hidden_s"].append(hidden)
        res["comm_s"].append(comm)
        res["exposed_s"].append(t_finished - t_backward_end)
        grads = [p.grad.detach().clone() for p in model.parameters()]
        res["copied"] = _grads_copied(ddp)
        opt.step()
        _crosscheck.keep(ctx, "grad_equivalence", f"{name}: step {s + 1}'s gradients and weights",
                         [grads, [p.detach() for p in model.parameters()]], atol=2 * TOL)
        digests = [None] * world
        dist.all_gather_object(digests, digest(model.named_parameters()))
        res["in_sync"].append(len(set(digests)) == 1)
        res["calls"].append(len(calls))
        res["bytes"].append(4 * sum(n for _, n in calls))  # fp32 elements -> bytes
        res["bytes_in_backward"].append(4 * sum(n for t, n in calls if t < t_backward_end))
        if ref is not None:
            ref_opt.zero_grad(set_to_none=True)
            _, ref_loss = ref(*data.batch(list(ids), SEQ, env.device))
            ref_loss.backward()
            res["grad_diff"].append(max((g - p.grad).abs().max().item() for g, p in zip(grads, ref.parameters())))
            ref_opt.step()
            res["param_diff"].append(max((p - q).abs().max().item()
                                         for p, q in zip(model.parameters(), ref.parameters())))
    del ddp
    return res


def _grads_copied(ddp) -> int | None:
    """How many parameters' .grad lie outside their bucket's reduced buffer after finish (BucketedDDP's contract: each
    .grad is a view of its slice, no copy: a copy costs every gradient's bytes again, each step); None for a wrapper
    without the starter's buckets (NaiveDDP)."""
    def inside(t, flat) -> bool:
        start = flat.data_ptr()
        return start <= t.data_ptr() < start + flat.numel() * flat.element_size()
    buckets = getattr(ddp, "buckets", None)
    if not buckets:
        return None
    return sum(p.grad is None or not inside(p.grad, b.flat) for b in buckets for p in b.params)


def _no_sync(ctx, seam, rec, env, k=3):

    data, rank, world = _data(), env.rank, env.world_size
    model = tiny_model(seed=200 + rank).to(env.device)
    ref = copy.deepcopy(model) if rank == 0 else None
    ddp = seam.BucketedDDP(model, bucket_cap_mb=SMALL_BUCKET_MB)
    calls = []
    for i in range(k):
        ids = list(range(i * BATCH * world, (i + 1) * BATCH * world))
        x, y = data.batch(ids[rank * BATCH:(rank + 1) * BATCH], SEQ, env.device)
        rec.start()
        with ddp.no_sync() if i < k - 1 else nullcontext():
            _, loss = ddp(x, y)
            (loss / k).backward()
        if i == k - 1:
            ddp.finish_gradient_synchronization()
        calls.append(len(rec.stop()))
    out = {"calls": calls}
    _crosscheck.keep(ctx, "no_sync_accumulation", "the accumulated gradients", [p.grad for p in model.parameters()],
                     atol=2 * TOL)
    if ref is not None:
        x, y = data.batch(list(range(k * BATCH * world)), SEQ, env.device)
        _, loss = ref(x, y)
        loss.backward()
        out["grad_diff"] = max((p.grad - q.grad).abs().max().item()
                               for p, q in zip(model.parameters(), ref.parameters()))
    return out


def task_correctness(ctx, target):
    from labs.common import dist as cdist

    env = cdist.init(timeout_s=PG_TIMEOUT_S)
    rec = CollectiveRecorder()  # before the learner's code is imported
    seam = seams.load(LAB, target)
    out = ctx.partial
    for name, make in (("naive", seam.NaiveDDP),
                       ("bucketed", lambda m: seam.BucketedDDP(m, bucket_cap_mb=SMALL_BUCKET_MB)),
                       ("bucketed_tail", lambda m: seam.BucketedDDP(m, bucket_cap_mb=TAIL_BUCKET_MB))):
        out[name], out[f"{name}_error"] = ctx.attempt(lambda make=make, name=name: _equivalence(ctx, seam, rec, make,
                                                                                                 env, name))
    out["no_sync"], out["no_sync_error"] = ctx.attempt(lambda: _no_sync(ctx, seam, rec, env))
    cdist.teardown()
    return out


def _step_plan(seed, env):
    """The differential step's set-up, the same in the learner's run and the reference's: randomised weights
    (dropout on: both sides draw the same masks) inside the checker's own wrapper (checker/labs/_plain_ddp.py: the
    learner's wrappers have their own checks), and this rank's micro-batches of each step, disjoint from the other
    ranks'."""
    from checker.labs._differential import logit_scale, randomise
    from checker.labs._plain_ddp import plain_ddp

    data, rank = _data(), env.rank
    model = tiny_model(seed, dropout=0.1).to(env.device)  # the same on every rank
    randomise(model, seed)
    set_scale = logit_scale(model)
    plan, n = [], 0
    for k, scale in STEP_PLAN:
        plan.append(([data.batch(range((n + i) * BATCH * env.world_size + rank * BATCH,
                                       (n + i) * BATCH * env.world_size + (rank + 1) * BATCH), SEQ, env.device)
                      for i in range(k)], scale))
        n += k
    return plain_ddp(model), set_scale, plan


def _snapshots_path(ctx, rank):
    return ctx.workdir / f"step.learner.rank{rank}.pt"


def task_step(ctx, target, seed=7):
    """The learner's train_step over the differential plan with accumulation (checker/labs/_differential.py):
    what each step did, and the weights and .grad after it, for the reference's own run (task_step_ref)."""
    import torch

    from checker.labs._differential import trajectory
    from labs.common import dist as cdist

    env = cdist.init(timeout_s=PG_TIMEOUT_S)
    rec = CollectiveRecorder()  # before the learner's code is imported
    seam = seams.load(LAB, target)
    model, set_scale, plan = _step_plan(seed, env)
    recs, snaps = trajectory(seam.train_step, model, set_scale, plan, seed + 1000 * env.rank, comm=rec)
    torch.save(snaps, _snapshots_path(ctx, env.rank))
    cdist.teardown()
    return {"learner": recs}


def task_step_ref(ctx, target, seed=7):
    """The reference's train_step over the same plan, in runs that never import the learner's code, and how far each
    rank's snapshots of the learner's run (task_step, an earlier phase) are from its own."""
    import torch

    from checker.labs._differential import compare, trajectory
    from labs.common import dist as cdist

    env = cdist.init(timeout_s=PG_TIMEOUT_S)
    rec = CollectiveRecorder()
    ref = seams.load(LAB, "solutions")
    model, set_scale, plan = _step_plan(seed, env)
    recs, snaps = trajectory(ref.train_step, model, set_scale, plan, seed + 1000 * env.rank, comm=rec)
    path = _snapshots_path(ctx, env.rank)
    diffs = None
    if path.exists():
        diffs = compare(snaps, torch.load(path, weights_only=True))
        path.unlink()
    cdist.teardown()
    return {"reference": recs, "diffs": diffs}


def _torch_ddp(module, device):
    """torch's DistributedDataParallel with its default 25 MB buckets, built by the checker."""
    from torch.nn.parallel import DistributedDataParallel

    from labs.common import dist as cdist

    return DistributedDataParallel(module, device_ids=cdist.ddp_device_ids(device))


def _torch_ddp_settings(seam, device) -> dict:
    """What the learner's make_torch_ddp built when asked for TAIL_BUCKET_MB buckets, and what it should have."""
    from labs.common import dist as cdist

    ddp = seam.make_torch_ddp(tiny_model(seed=1).to(device), device, bucket_cap_mb=TAIL_BUCKET_MB)
    return {"type": type(ddp).__name__, "cap": getattr(ddp, "bucket_bytes_cap", None), "asked_mb": TAIL_BUCKET_MB,
            "want_cap": int(TAIL_BUCKET_MB * 2**20),  # what torch's DDP makes of bucket_cap_mb
            "device_ids": getattr(ddp, "device_ids", "?"), "want_device_ids": cdist.ddp_device_ids(device)}


def _window(setup, batches, device, losses: list) -> None:
    """The checker's own loop over the wrapper: one step per batch, every loss kept (read after the timed windows)."""
    from labs.common import dist as cdist

    ddp, opt = setup
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = ddp(x, y)[1]
        loss.backward()
        getattr(ddp, "finish_gradient_synchronization", lambda: None)()
        opt.step()
        losses.append(loss.detach())
    cdist.synchronize(device)


def _take_turns(ctx, env, graded, learners=False, naive=None) -> dict:
    """One side of the speed ratio: `graded` (wrapper, optimizer) over the same batches in every window, warmed up
    once, then THROUGHPUT_WINDOWS windows, each begun when the checker gives this run its turn and timed by the
    checker (checker/relay.py); in the learner's run (`learners`), then one window of NaiveDDP (information; an empty
    one where it could not be built). Every rank's losses of the graded wrapper's steps go back: the timed steps must
    train as torch DDP's do, both sides doing the same maths on the same batches."""
    import time

    data = _data()
    batches = [data.batch(list(range((s * env.world_size + env.rank) * BATCH,
                                     (s * env.world_size + env.rank + 1) * BATCH)), SEQ, env.device)
               for s in range(THROUGHPUT_STEPS)]
    losses = []
    _window(graded, batches, env.device, losses)  # warm-up
    if naive is not None:
        _window(naive, batches, env.device, [])
    cpu = wall = 0.0  # this rank's CPU seconds per wall second over its timed windows (information)
    for _ in range(THROUGHPUT_WINDOWS):
        take_turn(ctx, env)
        c0, w0 = time.process_time(), time.perf_counter()
        _window(graded, batches, env.device, losses)
        cpu, wall = cpu + time.process_time() - c0, wall + time.perf_counter() - w0
    if learners:  # NaiveDDP's window, the order's last
        take_turn(ctx, env)
        if naive is not None:
            _window(naive, batches, env.device, [])
    take_turn(ctx, env)  # the last window ends when the checker hears this
    return {"losses": [float(x) for x in losses], "cpu_util": cpu / wall if wall else None}


def task_throughput(ctx, target):
    """The learner's side of the speed ratio: BucketedDDP (graded) and NaiveDDP (its figure for the record) in the
    checker's loop, taking turns with torch DDP's run (task_throughput_torch); and what the learner's make_torch_ddp
    builds (lab 5 trains with it), built once, not timed."""
    from labs.common import dist as cdist
    from labs.common.optim import make_optimizer

    env = cdist.init(timeout_s=TURNS_PG_TIMEOUT_S)
    seam = seams.load(LAB, target)
    out = {}
    out["torch_ddp"], out["torch_ddp_error"] = ctx.attempt(lambda: _torch_ddp_settings(seam, env.device))
    model = tiny_model(seed=1).to(env.device)
    graded = (seam.BucketedDDP(model), make_optimizer(model))
    naive_model = tiny_model(seed=1).to(env.device)
    # an unfinished NaiveDDP must not fail this check: its window is then empty
    wrapped, err = ctx.attempt(lambda: seam.NaiveDDP(naive_model))
    naive = (wrapped, make_optimizer(naive_model)) if not err else None
    out["naive_built"] = naive is not None  # (not a *_error: a run that fails later is not reported as NaiveDDP's)
    out.update(_take_turns(ctx, env, graded, learners=True, naive=naive))
    cdist.teardown()
    return out


def task_throughput_torch(ctx, target):
    """torch's DistributedDataParallel in the same loop, the other side of the speed ratio, in a run of its own that
    never imports the learner's code (target solutions; it loads no lab's code at all)."""
    from labs.common import dist as cdist
    from labs.common.optim import make_optimizer

    env = cdist.init(timeout_s=TURNS_PG_TIMEOUT_S)
    model = tiny_model(seed=1).to(env.device)
    out = _take_turns(ctx, env, (_torch_ddp(model, env.device), make_optimizer(model)))
    cdist.teardown()
    return out


def task_train(ctx, target, seed, steps, save_at=None, ckpt=None, resume=False, data_seed=0, after_weights=False):
    """The learner's train_step, BucketedDDP, ShardedSampler and checkpoint, at world size 2, with dropout. With
    save_at, a checkpoint after step save_at, two more steps and a second checkpoint killed while the file with the
    weights is half-written (_held_save.py: a rank's small RNG file passes whole; the rank that holds cues the kill);
    with after_weights, killed instead inside the first write after the weights' file is complete, on that rank (none
    where the weights' file is the last written: the kill lands after the save)."""
    import torch

    from labs.common import dist as cdist
    from labs.common.optim import make_optimizer, make_scheduler

    env = cdist.init(timeout_s=PG_TIMEOUT_S)
    out = ctx.partial
    cue = "saved_after" if after_weights else "saved"  # its own cue: the two killed runs go at once
    held = HeldSave(ctx, out, together=False, cue=cue, after=after_weights)  # before the learner's code is imported
    seam = seams.load(LAB, target)
    data = _data()
    model = tiny_model(seed=seed + env.rank, dropout=0.1).to(env.device)
    # a file of at least half the weights' bytes holds the weights (fp32 or bf16); an RNG file is ~20 KB of 480 KB
    held.min_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) // 2
    torch.manual_seed(seed + env.rank)
    ddp = seam.BucketedDDP(model)
    opt = make_optimizer(model)
    sched = make_scheduler(opt, warmup=5, total=steps)
    sampler = seam.ShardedSampler(data.num_windows(SEQ), BATCH, env.rank, env.world_size, seed=data_seed)
    start = seam.load_checkpoint(ckpt, ddp, opt, sched, sampler) if resume else 0
    out.update(start=start, losses=[])

    def run(a, b):
        for _ in range(a, b):
            loss = seam.train_step(ddp, opt, sched, [data.batch(sampler.next_ids(), SEQ, env.device) for _ in range(2)])
            out["losses"].append(float(loss).hex())

    run(start, save_at or steps)
    if save_at:
        seam.save_checkpoint(ckpt, ddp, opt, sched, sampler, save_at)  # complete: what a resume comes back to
        out["complete_at"] = save_at
        run(save_at, save_at + 2)
        out["rank"] = env.rank
        ctx.write(out)  # every rank's losses so far: a rank the kill finds in the learner's barrier reports no more
        held.armed = True  # the next torch.save of the weights is cut in half and the run killed inside it
        seam.save_checkpoint(ckpt, ddp, opt, sched, sampler, save_at + 2)
        out["held"] = False  # this rank wrote no weights: the kill lands in its barrier, or after the save
        ctx.await_kill(out, lambda: run(save_at + 2, steps), cue)
    out["digest"] = digest(model.named_parameters())
    if not (save_at or resume):  # the uninterrupted run, judged again by the reference's own run of it
        _crosscheck.keep(ctx, "resume_exact", "the uninterrupted run's losses, step by step",
                         [float.fromhex(x) for x in out["losses"]], rtol=TRAIN_LOSS_RTOL,
                         why=TRAIN_WHY)
    cdist.teardown()
    return out


TASKS = {"probe": task_probe, "sharding": task_sharding, "sharding_ref": task_sharding_ref,
         "correctness": task_correctness, "step": task_step, "step_ref": task_step_ref, "throughput": task_throughput,
         "throughput_torch": task_throughput_torch, "train": task_train}
