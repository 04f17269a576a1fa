"""Lab 9's worker side: the flash, ring, Ulysses and CP x DP step runs (the resume job is resume.py's), each
computing its own reference before the learner's code is imported and counting beneath it (measure.py)."""
from __future__ import annotations

from checker import seams
from checker.labs._common import probe, tiny_model
from checker.labs.lab9 import LAB, TOL, resume
from checker.labs.lab9.measure import (
    FlopCounter,
    P2PTimeline,
    grads,
    in_flight_compute,
    kept_bytes,
    max_diff,
    merge_case,
    merge_diffs,
    part_diffs,
    randn,
    sdpa,
    shard,
    worst_part,
)
from checker.labs.lab9.shapes import CP, FLASH_CASES, MEM_SHAPE, RING, SEED, ULYSSES


def _keeper(ctx, check: str):
    """keep(key, value) for `check`: the reference's own run allows twice the check's tolerance against the truth
    (both sides within TOL of the same deterministic truth, checker/labs/_crosscheck.py)."""
    from checker.labs import _crosscheck

    return lambda key, value: _crosscheck.keep(ctx, check, key, value, atol=2 * TOL)


def task_probe(ctx, target):
    return probe(LAB, target)


def task_flash(ctx, target, cases=FLASH_CASES, mem=MEM_SHAPE, seed=SEED):
    import torch

    from labs.common import dist as cdist

    dev = cdist.init().device  # one process: the grade's device (CUDA on a GPU node)
    gen = torch.Generator().manual_seed(seed)
    data = []  # the checker's own SDPA results, computed before the learner's code is imported
    for b, h, s, d, causal, _, _ in cases:
        q, k, v, g = (randn(gen, b, h, s, d, device=dev) for _ in range(4))
        data.append((q, k, v, g, grads(sdpa(causal), q, k, v, g)))
    merge_in, merge_want = merge_case(gen, dev)
    seam = seams.load(LAB, target)
    out = ctx.partial
    out["cases"] = [list(c) for c in cases]
    keep = _keeper(ctx, "flash_equivalence")
    out["merge"], out["merge_error"] = ctx.attempt(lambda: merge_diffs(seam.merge(*merge_in), merge_want))

    def equivalence():
        diffs = []
        for i, (c, (q, k, v, g, want)) in enumerate(zip(cases, data)):
            got = grads(lambda *t, c=c: seam.flash_attention(*t, causal=c[4], block_q=c[5], block_k=c[6]), q, k, v, g)
            keep(f"case{i}", got)
            parts = part_diffs(got, want)
            diffs.append(max(parts))
            out.setdefault("worst", []).append(worst_part(parts))
        return diffs
    out["equiv"], out["equiv_error"] = ctx.attempt(equivalence)

    b, h, s, d, tile = mem
    inputs = [randn(gen, b, h, s, d, device=dev).requires_grad_() for _ in range(3)]

    def memory():
        rows = {}
        for causal in (False, True):
            n, big, o = kept_bytes(lambda *t, c=causal: seam.flash_attention(*t, causal=c, block_q=tile,
                                                                             block_k=tile), inputs)
            rows["causal" if causal else "full"] = {"bytes": n, "largest": big}
            del o
        # the textbook formula, measured the same way: what flash saves you from
        naive, big, _ = kept_bytes(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / d ** 0.5, -1) @ v, inputs)
        rows["naive"] = {"bytes": naive, "largest": big}
        return rows
    out["mem"], out["mem_error"] = ctx.attempt(memory)
    out["mem_shape"] = list(mem)
    return out


def _ring_case(seam, env, full, want, layout, causal, block, comm=None, keep=None):
    """Max diff of this rank's rows of output and gradients; with comm, the bytes sent in forward and backward.
    keep(value): those rows, for the reference's own run to judge."""
    import torch

    r, n = env.rank, env.world_size
    q, k, v, g = ((seam.zigzag_shard(t, r, n, 2) if layout == "zigzag" else shard(t, r, n, layout)).detach()
                  .contiguous() for t in full)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    if comm:
        comm.start()
    out = seam.ring_attention(*leaves, causal=causal, layout=layout, block=block)
    fwd = comm.stop() if comm else []
    if comm:
        comm.start()
    gs = torch.autograd.grad(out, leaves, g)
    bwd = comm.stop() if comm else []
    mine = [shard(w, r, n, layout) for w in want]
    if keep:
        keep([out.detach(), *gs])
    parts = part_diffs([out.detach(), *gs], mine)
    return {"diff": max(parts), "worst": worst_part(parts),
            "fwd": [[op, size, sent] for op, size, sent in fwd], "bwd": [[op, size, sent] for op, size, sent in bwd]}


def task_ring(ctx, target, ring=RING, seed=SEED):
    import torch

    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    env = cdist.init(timeout_s=20)
    comm = CommBytes()  # before the learner's code is imported: every spelling of isend reaches it
    timeline = P2PTimeline()  # on top of it, as early
    n, h, d = env.world_size, ring["heads"], ring["head_dim"]
    gen = torch.Generator().manual_seed(seed)  # the same full tensors on every rank
    s = 2 * n * ring["chunk"]
    full = [randn(gen, 1, h, s, d, device=env.device) for _ in range(4)]
    want = {c: grads(sdpa(c), *full) for c in (True, False)}  # before the import, as above
    sb = 2 * n * ring["balance_chunk"]
    bal = [randn(gen, 1, h, sb, d, device=env.device) for _ in range(3)]
    seam = seams.load(LAB, target)
    out = ctx.partial
    out.update(world=n, shape=[1, h, s, d], balance_shape=[1, h, sb, d])
    keep = _keeper(ctx, "ring_equivalence")
    for name, layout, causal, counted in (("contiguous", "contiguous", True, True), ("zigzag", "zigzag", True, False),
                                          ("full", "contiguous", False, False)):
        out[name], out[f"{name}_error"] = ctx.attempt(lambda name=name, layout=layout, causal=causal, counted=counted:
                                                      _ring_case(seam, env, full, want[causal], layout, causal,
                                                                 ring["block"], comm if counted else None,
                                                                 lambda value: keep(name, value)))
        if out[f"{name}_error"]:
            return out  # a peer may be inside a send: stop here, and skip teardown's barrier

    def flops(layout, causal=True):  # forward and backward: the contract skips tiles above the diagonal in both
        local = [(seam.zigzag_shard(t, env.rank, n, 2) if layout == "zigzag" else shard(t, env.rank, n, layout))
                 .contiguous().requires_grad_() for t in bal]
        fwd, bwd = FlopCounter(), FlopCounter()
        with fwd.mode:
            o = seam.ring_attention(*local, causal=causal, layout=layout, block=ring["block"])
        with bwd.mode:
            o.backward(torch.ones_like(o))
        return [fwd.flops, bwd.flops]
    for name, layout, causal in (("zigzag", "zigzag", True), ("contiguous", "contiguous", True),
                                 ("noncausal", "contiguous", False)):
        out[f"flops_{name}"], out[f"flops_{name}_error"] = ctx.attempt(lambda a=layout, c=causal: flops(a, c))
        if out[f"flops_{name}_error"]:
            return out

    def overlap():  # not causal: every step has tiles to compute on every rank
        local = [shard(t, env.rank, n, "contiguous").contiguous() for t in bal]
        counter = FlopCounter()
        timeline.start()
        with torch.no_grad(), counter.mode:
            seam.ring_attention(*local, causal=False, layout="contiguous", block=ring["block"])
        events = timeline.stop()
        return {"tiles_in_flight": in_flight_compute(events, counter.times),
                "ops": sorted({e[0] for e in events}), "matmuls": len(counter.times)}
    out["overlap"], out["overlap_error"] = ctx.attempt(overlap)
    if out["overlap_error"]:
        return out
    timeline.uninstall()
    comm.uninstall()
    cdist.teardown()
    return out


def task_ulysses(ctx, target, ulysses=ULYSSES, seed=SEED):
    import torch

    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    env = cdist.init(timeout_s=20)
    comm = CommBytes()
    n, d = env.world_size, ulysses["head_dim"]
    h, s = 2 * n, n * ulysses["rows"]
    gen = torch.Generator().manual_seed(seed)
    full = [randn(gen, 1, h, s, d, device=env.device) for _ in range(4)]
    want = grads(sdpa(True), *full)
    seam = seams.load(LAB, target)
    out = ctx.partial
    out.update(world=n, shape=[1, h, s, d])

    def equivalence():
        q, k, v, g = (shard(t, env.rank, n, "contiguous").contiguous() for t in full)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        comm.start()
        o = seam.ulysses_attention(*leaves, causal=True)
        fwd = comm.stop()
        comm.start()
        gs = torch.autograd.grad(o, leaves, g)
        bwd = comm.stop()
        mine = [shard(w, env.rank, n, "contiguous") for w in want]
        _keeper(ctx, "ulysses_equivalence")("causal", [o.detach(), *gs])
        return {"diff": max_diff([o.detach(), *gs], mine), "fwd": [list(r) for r in fwd],
                "bwd": [list(r) for r in bwd]}
    out["equiv"], out["equiv_error"] = ctx.attempt(equivalence)
    if out["equiv_error"]:
        return out

    def uneven():
        x = torch.randn(1, h + 1, s // n, d, device=env.device)
        try:
            seam.ulysses_attention(x, x, x, causal=True)
        except ValueError as exc:
            return {"raised": "ValueError", "message": str(exc)[:300]}
        except Exception as exc:  # noqa: BLE001 - any other error is not the clear one asked for
            return {"raised": type(exc).__name__, "message": str(exc)[:300]}
        return {"raised": None, "message": ""}
    out["uneven"], out["uneven_error"] = ctx.attempt(uneven)
    comm.uninstall()
    cdist.teardown()
    return out


def task_cp(ctx, target, cp=CP, seed=SEED):
    import torch
    import torch.distributed as dist

    from labs.common import dist as cdist
    from labs.common.data import TokenFile, ensure_corpus

    env = cdist.init(timeout_s=20)
    n_cp, n_dp = cp["cp"], cp["dp"]
    groups = [dist.new_group([d * n_cp + c for c in range(n_cp)]) for d in range(n_dp)]  # every rank makes each
    d, c = divmod(env.rank, n_cp)
    ref = tiny_model(seed).to(env.device)  # one process's step on the global batch, before the learner's import
    s = ref.cfg.block_size
    x, y = TokenFile.open(ensure_corpus(ref.cfg.vocab_size)).batch(
        list(range(seed % 7 * cp["batch"], (seed % 7 + 1) * cp["batch"])), s, env.device)
    want_loss = ref(x, y)[1]
    want_loss.backward()
    want_grads = {k: p.grad.clone() for k, p in ref.named_parameters()}
    torch.optim.SGD(ref.parameters(), lr=cp["lr"]).step()
    want = dict(ref.named_parameters())
    rows = cp["batch"] // n_dp
    local = [shard(t[d * rows:(d + 1) * rows, None, :, None], c, n_cp, "zigzag")[:, 0, :, 0] for t in (x, y)]
    seam = seams.load(LAB, target)
    out = ctx.partial

    def step():
        model = tiny_model(seed).to(env.device)
        model = seam.apply_context_parallel(model, groups[d], s, "zigzag") or model
        loss = float(seam.cp_dp_step(model, torch.optim.SGD(model.parameters(), lr=cp["lr"]), local))
        diffs, problems = {"grad": 0.0, "weight": 0.0}, []
        kept = {"loss": loss}  # what is compared, for the reference's own run to judge
        for k, p in model.named_parameters():
            if k not in want:
                problems.append(f"{k} is not a parameter of the model: keep the model's names")
            elif p.grad is None:
                problems.append(f"{k} has no gradient")
            else:
                diffs["grad"] = max(diffs["grad"], (p.grad - want_grads[k]).abs().max().item())
                diffs["weight"] = max(diffs["weight"], (p.detach() - want[k].detach()).abs().max().item())
                kept[f"grad.{k}"], kept[f"weight.{k}"] = p.grad, p.detach()
        _keeper(ctx, "cp_dp_equivalence")("step", kept)
        return {"loss": loss, "want_loss": want_loss.item(), **diffs, "problems": problems[:3]}
    out["step"], out["step_error"] = ctx.attempt(step)
    if out["step_error"]:
        return out
    cdist.teardown()
    return out


TASKS = {"probe": task_probe, "flash": task_flash, "ring": task_ring, "ulysses": task_ulysses, "cp": task_cp,
         **resume.TASKS}
