"""Lab 6's worker side: the tp, pp and pp_timing runs (the package's docstring says what each measures), next to
the learner's code; checks.py decides."""
from __future__ import annotations

import time

from checker import seams
from checker.labs._common import CollectiveRecorder, probe, tiny_model
from checker.labs.lab6 import LAB, N_MICRO, SEED, TIMING, TOL

TP_BATCH, SEQ = 4, 64        # the TP run: every rank sees the same batch
PP_BATCH = 8                 # the PP run: N_MICRO (4) micro-batches of 2 sequences


def task_probe(ctx, target):
    return probe(LAB, target)


def _model(seed: int):
    """The tiny GPT from `seed`, every parameter then moved off its initial value by seeded noise.

    At initialisation every bias is 0 and every LayerNorm weight 1: a bias added on every rank before the
    all-reduce (summed N times), or a bias left out of a permutation, changes nothing there and would pass.
    Noise of 0.05 on everything makes such a slip move the logits by ~1e-2, 1,000x the tolerance."""
    import torch

    model = tiny_model(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():  # the tied embedding/head once: parameters() skips the repeat
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return model


def _batch(n, device):
    from labs.common.data import TokenFile, ensure_corpus

    return TokenFile.open(ensure_corpus(256)).batch(list(range(n)), SEQ, device)


def _keeper(ctx, check: str):
    """keep(key, value) for `check`: the reference's own run allows 2 x TOL against its values (both sides within TOL
    of the same deterministic truth: checker/labs/_crosscheck.py)."""
    from checker.labs import _crosscheck

    return lambda key, value: _crosscheck.keep(ctx, check, key, value, atol=2 * TOL)


def _local(t):
    """What this rank holds of t: a DTensor's local shard, or t itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _expected_shard(name, full, shape, rank, world, cfg):
    """The slice of the unsharded tensor that a rank holding `shape` should hold (the course's layout), or None.
    Column-parallel: rows r*n/N...; qkv: rank r's heads of q, k and v; row-parallel: weight columns r*n/N..."""
    import torch

    shape, fshape = tuple(shape), tuple(full.shape)
    if shape == fshape:
        return full
    if name.endswith(("attn.qkv.weight", "attn.qkv.bias")) and shape[0] * world == fshape[0]:
        d, part = cfg.n_embd, cfg.n_embd // world
        rows = torch.cat([torch.arange(rank * part, (rank + 1) * part) + k * d for k in range(3)])
        return full[rows]
    if shape[0] * world == fshape[0] and shape[1:] == fshape[1:]:
        n = shape[0]
        return full[rank * n:(rank + 1) * n]
    if len(shape) == 2 and shape[0] == fshape[0] and shape[1] * world == fshape[1]:
        n = shape[1]
        return full[:, rank * n:(rank + 1) * n]
    return None


def _split_bytes(model) -> list[int]:
    """Bytes this rank holds of each block's attention and MLP parameters: what their storage keeps allocated, each
    storage once. A slice of the full weight has 1/N of its elements, yet as a view it keeps the whole tensor."""
    out = []
    for b in model.blocks:
        storages = {}
        for p in (p for part in (b.attn, b.mlp) for p in part.parameters()):
            st = _local(p).untyped_storage()
            storages[st.data_ptr()] = st.nbytes()
        out.append(sum(storages.values()))
    return out


def _numel_bytes(model) -> list[int]:
    """Bytes of each block's attention and MLP parameters, counted from their elements."""
    return [sum(_local(p).numel() * _local(p).element_size() for part in (b.attn, b.mlp) for p in part.parameters())
            for b in model.blocks]


def _tp_part(make, rec, env, x, y, ref, ref_out, seed, tracked, keep):
    model = _model(seed).to(env.device)
    cfg = model.cfg
    model = make(model) or model
    spans, handles = [], []  # each block's forward and backward, by the checker's hooks
    for i, b in enumerate(model.blocks):
        handles += [b.register_forward_pre_hook(lambda *a, i=i: spans.append(("F0", i, time.perf_counter()))),
                    b.register_forward_hook(lambda *a, i=i: spans.append(("F1", i, time.perf_counter()))),
                    b.register_full_backward_pre_hook(lambda *a, i=i: spans.append(("B0", i, time.perf_counter()))),
                    b.register_full_backward_hook(lambda *a, i=i: spans.append(("B1", i, time.perf_counter())))]
    rec.start()
    tracked.clear()
    logits, loss = model(x, y)
    fwd = rec.stop()
    reduced_tracked = len(tracked)
    rec.start()
    loss.backward()
    bwd = rec.stop()
    for h in handles:
        h.remove()
    ref_params = dict(ref.named_parameters())
    grad_diff = weight_diff = 0.0
    problems, grads, weights = [], {}, {}
    for name, p in model.named_parameters():
        full = ref_params.get(name)
        if full is None:
            problems.append(f"{name} is not a parameter of the model: keep the model's names")
            continue
        local = weights[name] = _local(p).detach()
        want = _expected_shard(name, full.detach(), local.shape, env.rank, env.world_size, cfg)
        if want is None:
            problems.append(f"{name} has shape {tuple(local.shape)}: neither {tuple(full.shape)} nor a 1/"
                            f"{env.world_size} slice of it")
            continue
        weight_diff = max(weight_diff, (local - want).abs().max().item())
        if p.grad is None:
            problems.append(f"{name} has no gradient")
            continue
        g_want = _expected_shard(name, full.grad, local.shape, env.rank, env.world_size, cfg)
        grads[name] = _local(p.grad).detach()
        grad_diff = max(grad_diff, (grads[name] - g_want).abs().max().item())
    keep({"logits": logits.detach(), "loss": loss.item(), "grads": grads, "weights": weights})

    def per_block(calls, start, end):
        ivals = {i: [t for k, j, t in spans if j == i and k in (start, end)] for i in range(len(model.blocks))}
        return [sum(1 for t, _ in calls if len(iv) == 2 and min(iv) <= t <= max(iv)) for iv in ivals.values()]

    return {"logits_diff": (logits - ref_out[0]).abs().max().item(), "loss_diff": abs(loss.item() - ref_out[1]),
            "grad_diff": grad_diff, "weight_diff": weight_diff, "problems": problems[:5],
            "split_bytes": _split_bytes(model), "numel_bytes": _numel_bytes(model), "full_bytes": _split_bytes(ref),
            "reduced_tracked": reduced_tracked,
            "fwd_calls": len(fwd), "bwd_calls": len(bwd), "numels": sorted({n for _, n in fwd + bwd}),
            "fwd_per_block": per_block(fwd, "F0", "F1"), "bwd_per_block": per_block(bwd, "B0", "B1"),
            "activation_numel": TP_BATCH * SEQ * cfg.n_embd, "n_embd": cfg.n_embd, "n_layer": cfg.n_layer}


def _track_in_place_reduces() -> list:
    """Wrap torch.distributed.all_reduce (before learner code is imported, as the recorder) to note each call on a
    tensor autograd tracks (requires_grad): an all-reduce sums in place, so that tensor, an input of an op in the
    graph (reduce_from_tp's partial output, whose contract leaves it unchanged), is overwritten."""
    import torch.distributed as dist

    tracked, inner = [], dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        if getattr(tensor, "requires_grad", False):
            tracked.append(tuple(tensor.shape))
        return inner(tensor, *args, **kwargs)
    dist.all_reduce = all_reduce
    return tracked


def task_tp(ctx, target, seed=SEED, parts=("hand", "dtensor")):
    from labs.common import dist as cdist

    env = cdist.init(timeout_s=20)
    rec = CollectiveRecorder()  # before the learner's code is imported: every spelling of all_reduce reaches it
    tracked = _track_in_place_reduces()
    seam = seams.load(LAB, target)
    x, y = _batch(TP_BATCH, env.device)
    ref = _model(seed).to(env.device)
    logits, loss = ref(x, y)
    loss.backward()
    ref_out = (logits.detach(), loss.item())

    def dtensor(model):
        from torch.distributed.device_mesh import init_device_mesh
        return seam.parallelize_dtensor(model, init_device_mesh(env.device.type, (env.world_size,)))

    out, keep = ctx.partial, _keeper(ctx, "tp_equivalence")
    for name, make in (("hand", seam.parallelize), ("dtensor", dtensor)):
        if name not in parts:
            continue
        out[name], out[f"{name}_error"] = ctx.attempt(lambda make=make, name=name: _tp_part(
            make, rec, env, x, y, ref, ref_out, seed, tracked, lambda value: keep(name, value)))
        if out[f"{name}_error"]:
            return out  # its peer may be inside a collective: stop here, and skip teardown's barrier
    cdist.teardown()
    return out


def _ce(logits, y):
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def _pp_part(seam, env, run, ref, ref_losses, seed, keep):
    import torch.distributed as dist

    model = _model(seed).to(env.device)
    names = {id(p): n for n, p in model.named_parameters()}
    stage = seam.split_stages(model, env.rank, env.world_size)
    losses = [float(v) for v in run(stage)]
    seam.sync_tied_grads(stage)
    ref_params, grad_diff, problems, held, grads = dict(ref.named_parameters()), 0.0, [], [], {}
    for p in stage.parameters():
        name = names.get(id(p))
        if name is None:
            problems.append("the stage holds a parameter that is not the model's own (a copy?): "
                            "build the stage from the model's modules")
            break
        held.append(name)
        if p.grad is None:
            problems.append(f"{name} has no gradient on stage {env.rank}")
            continue
        grads[name] = p.grad.detach()
        grad_diff = max(grad_diff, (p.grad - ref_params[name].grad).abs().max().item())
    last = env.rank == env.world_size - 1  # losses: the last stage's (pipeline_step returns [] elsewhere)
    keep({"losses": losses if last else [], "grads": grads})
    every = [None] * env.world_size
    dist.all_gather_object(every, held)
    missing = sorted(set(ref_params) - {n for h in every for n in h})
    if missing:
        problems.append(f"no stage holds {', '.join(missing[:3])}")
    loss_diff = max((abs(a - b) for a, b in zip(losses, ref_losses)), default=0.0)
    if last and len(losses) != len(ref_losses):
        problems.append(f"the last stage returned {len(losses)} losses for {len(ref_losses)} micro-batches")
    stage_bytes = sum(p.numel() * p.element_size() for p in stage.parameters())
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"losses": losses, "loss_diff": loss_diff, "grad_diff": grad_diff, "problems": problems,
            "stage_bytes": stage_bytes, "model_bytes": model_bytes}


def _count_blocking_sends() -> list:
    """Wrap torch.distributed.send (a blocking send): the list gets one entry per call. gloo buffers a small send
    and returns; NCCL's waits for the peer's receive, so one facing the peer's own send deadlocks on GPUs."""
    import torch.distributed as dist

    calls, inner = [], dist.send

    def send(tensor, *args, **kwargs):
        calls.append(tuple(tensor.shape))
        return inner(tensor, *args, **kwargs)
    dist.send = send
    return calls


def _chained_stages(seam, env, seed, keep) -> float:
    """split_stages on a GPT of 4 layers (tiny has 2: one block per stage, where any split is contiguous), eval mode:
    each stage's forward chained into the next by broadcast, against the whole model's logits; the largest
    difference, on the last stage (0 elsewhere)."""
    import dataclasses

    import torch
    import torch.distributed as dist

    from labs.common.model import build_model, get_config

    torch.manual_seed(seed)
    model = build_model(dataclasses.replace(get_config("tiny"), n_layer=4, dropout=0.0)).to(env.device).eval()
    x, _ = _batch(2, env.device)
    stage = seam.split_stages(model, env.rank, env.world_size)
    with torch.no_grad():
        h = x
        for s in range(env.world_size - 1):  # stage s's output, to every rank (stage s + 1 reads it)
            out = stage(h) if env.rank == s else None
            buf = out.contiguous() if out is not None else torch.empty(x.shape + (model.cfg.n_embd,),
                                                                        device=env.device)
            dist.broadcast(buf, src=s)
            h = buf
        if env.rank != env.world_size - 1:
            return 0.0
        logits = stage(h)
        keep("chained", logits)
        return (logits - model(x)[0]).abs().max().item()


def task_pp(ctx, target, seed=SEED):
    import torch

    from labs.common import dist as cdist

    env = cdist.init(timeout_s=20)
    sends = _count_blocking_sends()  # before the learner's code is imported, as the TP run's recorder
    seam = seams.load(LAB, target)
    x, y = _batch(PP_BATCH, env.device)
    ref = _model(seed).to(env.device)
    _, loss = ref(x, y)
    loss.backward()  # equal micro-batches: the mean of their mean losses is the batch's mean loss
    with torch.no_grad():
        ref_losses = [ref(a, b)[1].item() for a, b in zip(x.chunk(N_MICRO), y.chunk(N_MICRO))]
    mb = PP_BATCH // N_MICRO
    shape = (mb, SEQ, ref.cfg.n_embd)
    last = env.rank == env.world_size - 1

    out, keep = ctx.partial, _keeper(ctx, "pp_equivalence")

    def hand(schedule):
        def run(stage):
            sends.clear()
            losses = seam.pipeline_step(stage, list(zip(x.chunk(N_MICRO), y.chunk(N_MICRO))), _ce, shape, schedule)
            out[f"{schedule}_blocking_sends"] = len(sends)
            return losses
        return run

    def torch_pp(schedule):
        def run(stage):
            sched, losses = seam.torch_schedule(stage, N_MICRO, _ce, env.device, schedule), []
            order = []  # F: a micro-batch's forward on this stage; B: its backward reached the stage's first weight
            hooks = [stage.register_forward_pre_hook(lambda *a: order.append("F")),
                     next(stage.parameters()).register_hook(lambda g: order.append("B"))]
            try:
                if env.rank == 0:
                    sched.step(x)
                elif last:
                    sched.step(target=y, losses=losses)
                else:
                    sched.step()
            finally:
                for h in hooks:
                    h.remove()
            out[f"torch_{schedule}_order"] = "".join(order)
            return [v.item() for v in losses]
        return run

    out["chained"], out["chained_error"] = ctx.attempt(lambda: _chained_stages(seam, env, seed, keep))
    if out["chained_error"]:
        return out  # as in task_tp
    for name, run in (("gpipe", hand("gpipe")), ("1f1b", hand("1f1b")), ("torch_gpipe", torch_pp("gpipe")),
                      ("torch_1f1b", torch_pp("1f1b"))):
        out[name], out[f"{name}_error"] = ctx.attempt(lambda run=run, name=name: _pp_part(
            seam, env, run, ref, ref_losses, seed, lambda value: keep(name, value)))
        if out[f"{name}_error"]:
            return out  # as in task_tp
    cdist.teardown()
    return out


def _held(base):
    """`base` (SleepStage) that also counts, at each forward, the micro-batches whose received input or output is
    still referenced by anyone (weak references: counting keeps none alive). The timeline says when a micro-batch's
    backward ran; this says whether the schedule let go of its tensors afterwards."""
    import weakref

    class HeldStage(base):
        def reset(self) -> None:
            super().reset()
            self.refs, self.peak_held = [], 0

        def forward(self, x):
            y = super().forward(x)
            if x.device.type != "meta":  # the first stage's input is the caller's data (no grad): not the schedule's
                self.refs.append([weakref.ref(t) for t in ((x, y) if x.requires_grad else (y,))])
                alive = sum(any(r() is not None for r in refs) for refs in self.refs)
                self.peak_held = max(self.peak_held, alive)
            return y
    return HeldStage


def task_pp_timing(ctx, target):
    import torch
    import torch.distributed as dist

    from labs.common import dist as cdist
    from labs.instruments.stage_probe import SleepStage

    env = cdist.init(timeout_s=20)
    seam = seams.load(LAB, target)
    t = TIMING
    shape = (t["micro_batch"], t["width"])

    def step(schedule, m):
        torch.manual_seed(0)  # the same micro-batches on every rank
        mbs = [(torch.randn(shape, device=env.device), torch.randn(shape, device=env.device)) for _ in range(m)]
        stage = _held(SleepStage)(t["width"], t["forward_s"], t["backward_s"]).to(env.device)
        dist.barrier()  # start together: the step's window opens at the first stage's first forward
        seam.pipeline_step(stage, mbs, torch.nn.functional.mse_loss, shape, schedule)
        cdist.synchronize(env.device)
        held[str(m)] = max(held.get(str(m), 0), stage.peak_held)
        return stage.events

    out = ctx.partial
    for schedule in ("gpipe", "1f1b"):
        held = out[f"{schedule}_held"] = {}  # m -> the most micro-batches whose tensors were referenced at once

        def runs(schedule=schedule):
            step(schedule, 2)  # warm-up: first sends, allocator, autograd
            return {str(m): [step(schedule, m) for _ in range(t["reps"])] for m in t["micro_batches"]}
        out[schedule], out[f"{schedule}_error"] = ctx.attempt(runs)
        if out[f"{schedule}_error"]:
            return out  # as in task_tp
    cdist.teardown()
    return out


TASKS = {"probe": task_probe, "tp": task_tp, "pp": task_pp, "pp_timing": task_pp_timing}
