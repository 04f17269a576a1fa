"""Lab 7's worker side: the memory, amp, timing and fp8 runs (the fast path's are in fast_tasks.py). What each run
measures is in this package's docstring (__init__.py); the checks that read them are in checks.py."""
from __future__ import annotations

import math

from checker import seams
from checker.labs import _crosscheck
from checker.labs._common import StorageTracker, digest, grad_norm, probe
from checker.labs.lab7 import AMP_TOL, EQUIV_TOL, FP8_TOL, GRAD_BAND, GRAD_TOL, LAB, LOSS_BAND
from checker.labs.lab7.fast_tasks import task_fast_measure, task_fast_predict
from checker.labs.lab7.setup import (
    AMP_BATCH,
    AMP_LR,
    AMP_STEPS,
    ESTIMATE_RECOMPUTED,
    FP8,
    GROWTH_INTERVAL,
    OVERFLOW_AT,
    PLAN,
    PLAN_KEYS,
    PRECISIONS,
    RECOMPUTE,
    SCALE_STEPS,
    SEED,
    SHAPES,
    TIMING,
    plan_cfg,
)


def task_probe(ctx, target):
    return probe(LAB, target)


def _live_bytes(model, x, run_blocks, context=None):
    """Bytes of storages created while run_blocks(x) ran that are still alive after it: what the graph keeps
    for backward. Parameters (model state) and the output (the caller holds it) are left out; x counts if kept."""
    import contextlib

    skip = {p.untyped_storage()._cdata for p in model.parameters()}
    track = StorageTracker()
    with track:
        h = x * 1.0  # the block input as an activation the checker made: counted only if something keeps it
    with (context or contextlib.nullcontext()), track:
        out = run_blocks(h)
    del h
    skip.add(out.untyped_storage()._cdata)
    return sum(n for k, (ref, n) in track.refs.items() if k not in skip and not ref.expired()), out


def _cfg(n_embd, n_head, dropout):
    import dataclasses

    from labs.common.model import get_config
    return dataclasses.replace(get_config("tiny"), n_embd=n_embd, n_head=n_head, dropout=dropout)


def _own_recompute(mode):
    """The checker's own recomputation of every block, as the README defines it (full: checkpoint the block;
    selective: keep the matmuls' outputs, recompute the rest): the estimate is measured apart from recompute.py."""
    import functools

    import torch
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    mm = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}

    def keep_mm(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in mm else CheckpointPolicy.PREFER_RECOMPUTE
    extra = {"context_fn": functools.partial(create_selective_checkpoint_contexts, keep_mm)} if mode == "selective" \
        else {}

    def apply(model):
        for block in model.blocks:
            block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False, **extra)
    return apply


def _measure(cfg, batch, seq, seed, recompute=None, context=None):
    """Bytes per block kept by the tiny GPT's blocks of `cfg`, training mode; recompute(model) applies one."""
    import torch

    from labs.common.model import build_model

    torch.manual_seed(seed)
    model = build_model(cfg).train()
    if recompute:
        recompute(model)
    # its own generator: whatever the learner's recompute draws, both sides of the comparison get this input
    x = torch.randn(batch, seq, cfg.n_embd, generator=torch.Generator().manual_seed(seed), requires_grad=True)

    def blocks(h):
        for b in model.blocks:
            h = b(h)
        return h
    n, _ = _live_bytes(model, x, blocks, context)
    return n // cfg.n_layer


def task_memory(ctx, target, shapes=SHAPES, seed=SEED):
    seam = seams.load(LAB, target)
    out = ctx.partial
    out["shapes"] = shapes
    # activation_estimate: the learner's prediction vs the checker's measurement, fp32 and bf16 (the checker's own
    # autocast), every shape with no recomputation, the first few under the checker's own selective and full
    import torch

    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    cases = [(pr, "none", shape) for pr in PRECISIONS for shape in shapes] + [
        (pr, rc, shape) for rc in RECOMPUTE for pr in PRECISIONS for shape in shapes[:ESTIMATE_RECOMPUTED]]
    out["cases"] = cases
    out["measured"] = [_measure(_cfg(h, a, p), b, s, seed, _own_recompute(rc) if rc != "none" else None,
                                context=bf16() if pr == "bf16" else None) for pr, rc, (h, a, b, s, p) in cases]
    out["predicted"], out["predicted_error"] = ctx.attempt(lambda: [
        int(seam.activation_bytes(_cfg(h, a, p), b, s, precision=pr, recompute=rc))
        for pr, rc, (h, a, b, s, p) in cases])
    if out["predicted"] is not None:  # the reference's run judges them against its own, measured apart from yours
        _crosscheck.keep(ctx, "activation_estimate", "predicted", out["predicted"])
    h, a, b, s, p = shapes[0]
    cfg = _cfg(h, a, 0.1)
    out["cfg"] = dict(n_embd=h, n_head=a, batch=b, seq=s)
    for mode in ("full", "selective"):  # checkpoint_memory
        out[mode], out[f"{mode}_error"] = ctx.attempt(
            lambda mode=mode: _measure(cfg, b, s, seed, lambda model: seam.apply_recompute(model, mode)))
    out["bf16"], out["bf16_error"] = ctx.attempt(  # amp_memory: the learner's autocast vs the checker's
        lambda: _measure(cfg, b, s, seed, context=seam.autocast("cpu", "bf16")))
    if out["bf16"] is not None:
        _crosscheck.keep(ctx, "amp_memory", "bf16", out["bf16"])
    out["bf16_ref"] = _measure(cfg, b, s, seed, context=bf16())
    out["fp32"] = _measure(cfg, b, s, seed)
    out["equiv"], out["equiv_error"] = ctx.attempt(lambda: _equivalence(ctx, seam, seed))
    out["plan"], out["plan_error"] = ctx.attempt(lambda: _plans(seam))
    return out


def _equivalence(ctx, seam, seed):
    """Two steps' losses and gradients, each mode vs no recomputation, dropout on and the same seeds. Then one step
    with the embeddings frozen, as when fine-tuning the blocks: the first block's input then does not require grad.
    The README asks for non-reentrant checkpointing, which differentiates through everything the forward used; the
    reentrant one (use_reentrant=True) only through inputs that require grad, so there the blocks' parameters get no
    gradient at all (torch only warns), a difference no run with trainable embeddings shows."""
    import torch

    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.model import build_model

    data = TokenFile.open(ensure_corpus(256))
    batches = [data.batch(list(range(i * 4, i * 4 + 4)), 64, torch.device("cpu")) for i in range(2)]

    def run(mode, frozen=False):
        torch.manual_seed(seed)
        model = build_model(_cfg(64, 4, 0.1)).train()
        if frozen:
            model.tok_emb.weight.requires_grad_(False)
            model.pos_emb.weight.requires_grad_(False)
        if mode:
            seam.apply_recompute(model, mode)
        losses, grads = [], []
        for i, (x, y) in enumerate(batches[:1] if frozen else batches):
            torch.manual_seed(seed + 100 + i)  # the dropout masks of this step
            _, loss = model(x, y)
            loss.backward()
            losses.append(loss.item())
            grads.append([None if p.grad is None else p.grad.clone() for p in model.parameters() if p.requires_grad])
            model.zero_grad(set_to_none=True)
        return losses, grads

    def diff(got, ref):
        lo, gr = got
        pairs = [(a, b) for s, t in zip(gr, ref[1]) for a, b in zip(s, t)]
        return {"loss_diff": max(abs(a - b) for a, b in zip(lo, ref[0])),
                "grad_diff": max((a - b).abs().max().item() if a is not None else float("inf") for a, b in pairs),
                "no_grad": sum(a is None for a, _ in pairs)}
    def kept(key, got):  # every loss and gradient, for the reference's run to judge (None: failed here already)
        if not any(g is None for step in got[1] for g in step):
            _crosscheck.keep(ctx, "checkpoint_equivalence", key, got, atol=2 * EQUIV_TOL)
        return got
    ref, ref_frozen = run(None), run(None, frozen=True)
    out = {}
    for mode in ("full", "selective"):
        out[mode] = diff(kept(mode, run(mode)), ref)
        out[f"{mode}, embeddings frozen"] = diff(kept(f"{mode}.frozen", run(mode, frozen=True)), ref_frozen)
    return out


def _plans(seam):
    from labs.common.model import get_config

    cfg, p = get_config(PLAN["config"]), PLAN
    assert {k: getattr(cfg, k) for k in plan_cfg()} == plan_cfg(), "labs/common/model.py's gpt2-124m changed"
    plans = (seam.plan_memory(cfg, p["n_params"], p["batch"], p["seq"], p["world_size"], int(g * 2 ** 30))
             for g in p["budgets_gib"])
    return [None if plan is None else {k: plan.get(k) for k in PLAN_KEYS} for plan in plans]


def _batches(n, batch):
    import torch

    from labs.common.data import TokenFile, ensure_corpus

    data = TokenFile.open(ensure_corpus(256))
    return [data.batch(list(range(i * batch, (i + 1) * batch)), 64, torch.device("cpu")) for i in range(n)]


def _fresh(seed):
    import torch

    from labs.common.model import build_model, get_config

    torch.manual_seed(seed)
    model = build_model(get_config("tiny")).train()
    return model, torch.optim.AdamW(model.parameters(), lr=AMP_LR)


def _bf16_grads(batch, seed):
    """The checker's bf16 recipe on a fresh model: forward and loss under autocast, backward outside it. The
    gradients of one step (deterministic on the CPU: the learner's step on the same weights gives the same bits)."""
    import torch

    model, _ = _fresh(seed)
    torch.manual_seed(seed)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(*batch)[1]
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def task_amp(ctx, target, seed=SEED, growth_interval=GROWTH_INTERVAL):
    import torch

    seam = seams.load(LAB, target)
    out = ctx.partial
    batches = _batches(AMP_STEPS, AMP_BATCH)
    model, opt = _fresh(seed)  # the checker's own fp32 loop
    ref = []
    for i, (x, y) in enumerate(batches):
        torch.manual_seed(seed + i)
        opt.zero_grad()
        loss = model(x, y)[1]
        loss.backward()
        opt.step()
        ref.append(loss.item())
    out["fp32"] = ref

    want = _bf16_grads(batches[0], seed)

    def bf16():
        model, opt = _fresh(seed)
        computed: set[str] = set()  # the dtype the MLP's first Linear computed in (bf16 asked; fp16 has its bytes)
        model.blocks[0].mlp.fc.register_forward_hook(lambda mod, args, out: computed.add(str(out.dtype)))
        handed: list[list] = []  # step 1's gradients as the optimizer is handed them, vs the checker's recipe's
        opt.register_step_pre_hook(lambda o, args, kwargs: handed.append(
            [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]) if not handed else None)
        losses = []
        for i, b in enumerate(batches):
            torch.manual_seed(seed + i)
            losses.append(float(seam.train_step(model, opt, b, "bf16")))
        _crosscheck.keep(ctx, "amp_equivalence", "bf16.losses", losses, rtol=2 * AMP_TOL)
        if handed and not any(g is None for g in handed[0]):
            _crosscheck.keep(ctx, "amp_equivalence", "bf16.step1_grads", handed[0], rtol=2 * GRAD_TOL)
        dtypes = {str(p.dtype) for p in model.parameters()} | {str(p.grad.dtype) for p in model.parameters()
                                                               if p.grad is not None}
        dtypes |= {str(v.dtype) for st in opt.state.values() for v in st.values()
                   if torch.is_tensor(v) and v.is_floating_point()}
        return {"losses": losses, "dtypes": sorted(dtypes), "computed": sorted(computed),
                "grad_diff": max((g - w).abs().max().item() if g is not None else float("inf")
                                 for g, w in zip(handed[0], want)) if handed else None,
                "grad_max": max(w.abs().max().item() for w in want)}
    out["bf16"], out["bf16_error"] = ctx.attempt(bf16)
    out["fp16"], out["fp16_error"] = ctx.attempt(lambda: _loss_scaling(ctx, seam, seed))
    out["growth"], out["growth_error"] = ctx.attempt(lambda: _scale_growth(seam, growth_interval))
    return out


def _scale_growth(seam, interval):
    """The scale used at each step of a LossScaler(growth_interval=interval) the checker drives on one parameter:
    interval - 1 clean steps, an overflow (a NaN written into the gradient: the fp16 run injects inf, so the two
    runs see both kinds), 2 * interval + 1 clean steps. The scale used is read from the gradient of loss = sum(p):
    d(S * loss)/dp = S, whatever p holds."""
    import torch

    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([p], lr=1e-3)
    scaler = seam.LossScaler(growth_interval=interval)
    overflow, scales, kept = interval - 1, [], None
    for i in range(3 * interval + 1):
        opt.zero_grad(set_to_none=True)
        scaler.scale(p.sum()).backward()
        scales.append(p.grad[0].item())
        before = p.detach().clone()
        if i == overflow:
            p.grad[1] = float("nan")  # 0 x inf, inf - inf: what an fp16 overflow often becomes by the gradient
        scaler.step(opt)
        scaler.update()
        if i == overflow:
            kept = bool(torch.equal(p.detach(), before))  # the NaN step must leave the weights as they were
    return {"scales": scales, "interval": interval, "overflow": overflow, "nan_step_skipped": kept,
            "finite": bool(torch.isfinite(p).all())}


def _loss_scaling(ctx, seam, seed):
    import copy

    import torch

    model, opt = _fresh(seed)
    scaler = seam.LossScaler()
    target = model.blocks[0].mlp.fc.weight
    scales, steps = [], []

    def read_scale(module, args, output):  # the gradient reaching the loss is the scale backward started from
        output[1].register_hook(lambda g: scales.append(g.item()))
    model.register_forward_hook(read_scale)
    # The gradients the optimizer is handed, against the checker's own fp32 gradients at the same weights and
    # dropout masks: a scaler that never divides the scale out hands it S x the gradient (AdamW, nearly blind to
    # a gradient's scale, would still train, so only this shows it).
    seen: list[float] = []
    opt.register_step_pre_hook(lambda o, args, kwargs: seen.append(grad_norm(model)))
    computed: set[str] = set()  # the dtype a Linear's output had in the learner's fp16 forward
    model.blocks[0].mlp.fc.register_forward_hook(lambda mod, args, out: computed.add(str(out.dtype)))
    for i, b in enumerate(_batches(SCALE_STEPS, 4)):
        ref = copy.deepcopy(model).float()
        for m in ref.modules():  # not the readers of the scale and of the fp16 dtype: only the learner's step
            m._forward_hooks.clear()
        torch.manual_seed(seed + i)
        ref_loss = ref(*b)[1]
        ref_loss.backward()
        true_norm = grad_norm(ref)
        hook = target.register_hook(lambda g: torch.full_like(g, float("inf"))) if i == OVERFLOW_AT else None
        before, n_seen = digest(model.named_parameters()), len(seen)
        torch.manual_seed(seed + i)
        loss = float(seam.train_step(model, opt, b, "fp16", scaler))
        if hook:
            hook.remove()
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        # what this step compared with the checker's fp32 truth, for the reference's run to judge: the loss, and the
        # norm the optimizer was handed as log2 (GRAD_BAND is a factor of 2 either way; twice it, a factor of 4)
        _crosscheck.keep(ctx, "loss_scaling", f"fp16.step{i}.loss", loss, rtol=2 * (LOSS_BAND[1] - 1))
        if len(seen) > n_seen:
            _crosscheck.keep(ctx, "loss_scaling", f"fp16.step{i}.log2_grad_norm",
                             math.log2(seen[-1]) if seen[-1] > 0 else -math.inf, atol=2 * math.log2(GRAD_BAND[1]))
        steps.append({"changed": digest(model.named_parameters()) != before, "finite": finite, "loss": loss,
                      "grad_ratio": seen[-1] / true_norm if len(seen) > n_seen and true_norm > 0 else None,
                      "loss_ratio": loss / ref_loss.item()})
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    return {"scales": scales, "steps": steps, "dtypes": dtypes, "computed": sorted(computed)}


def task_timing(ctx, target, mode="full", reps=TIMING["reps"], steps=TIMING["steps"], seed=SEED):
    """One side of recompute_cost, in a process of its own, taking its timed windows in turn with the other side
    (checker/relay.py): mode "full", the learner's apply_recompute(model, "full"); "none", the step with no
    recomputation, torch's own code in a run of the reference's (target solutions) that never loads the learner's
    package. Each of the `reps` windows, begun when the checker gives this run its turn, is `steps` steps, and the
    checker reads its CPU seconds itself (the kernel's clock of this process): nothing here reports a time."""
    import torch

    from labs.common.model import build_model

    _keep_freed_memory()
    t = TIMING
    cfg = _cfg(t["n_embd"], t["n_head"], 0.1)
    x = torch.randint(0, cfg.vocab_size, (t["batch"], t["seq"]), generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    model = build_model(cfg).train()
    if mode != "none":
        seams.load(LAB, target).apply_recompute(model, mode)
    torch.manual_seed(seed + 1)  # the dropout masks: the same on both sides, whatever importing the package drew
    losses = []

    def step():
        loss = model(x, x)[1]
        loss.backward()
        losses.append(loss.detach())
    for _ in range(2):  # warm-up: allocator, autograd, checkpoint's first call
        step()
    for _ in range(reps):
        ctx.turn()
        for _ in range(steps):
            step()
    ctx.turn()  # the last window ends when the checker hears this
    # every step's loss: the same seed, weights and dropout masks on both sides, so the timed steps must give the
    # losses of the step without recomputation (recomputation reruns the same ops: measured equal to the bit)
    return {"mode": mode, "losses": [float(v) for v in losses], "cfg": dict(cfg.to_dict(), **t)}


def _keep_freed_memory():
    """glibc keeps what a step frees for the next one instead of handing it back to the kernel: alone in its process,
    full recomputation's step (its backward allocates the rerun's activations) took ~1,400 fresh pages a step
    (none's ~400), 3-5 ms of CPU time in page faults that grows with the machine's load; with this, ~15 each. The
    band is about the work a step does, not the allocator's. Both sides alike; nothing where the libc is another."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD: never trim the heap's top
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks under 32 MiB (its maximum) from the heap, not mmap
    except (OSError, AttributeError):
        pass


def _fp8_reference(fp8, seed):
    """The checker's emulation, written from the contracts: every cast as bytes, every scale, the layer's steps."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    top = {e4: float(torch.finfo(e4).max), e5: float(torch.finfo(e5).max)}

    def cast(x, s, dt):
        return (x.float() * s).clamp(-top[dt], top[dt]).to(dt)

    casts = []  # (x, scale, dtype name, bytes): far beyond range, tiny, negative, both formats
    for dt in (e4, e5):
        for s in (1.0, 0.125, 1000.0):
            x = torch.randn(7, 5, generator=gen) * torch.tensor([1e-3, 1.0, 30.0, 600.0, 1e5])
            casts.append((x, s, str(dt), cast(x, s, dt).view(torch.uint8).tolist()))
    stream = []
    for a in fp8["amax"]:
        x = torch.randn(fp8["rows"], fp8["cols"], generator=gen)
        stream.append(x / x.abs().max() * a if a else x * 0)
    scales, hist, used, qs = [], [0.0] * fp8["history"], 1.0, []
    for x in stream:
        qs.append(cast(x, used, e4).view(torch.uint8).tolist())
        scales.append(used)
        hist = [x.abs().max().item()] + hist[:-1]
        m = max(hist)
        used = top[e4] / m / 2 ** fp8["margin"] if m > 0 else 1.0
    w = torch.randn(fp8["cols"] // 2, fp8["cols"], generator=gen) / 4
    layer_in = [(torch.randn(fp8["rows"], fp8["cols"], generator=gen) * (1 + i) ** 2,  # amax rising, and
                 torch.randn(fp8["rows"], fp8["cols"] // 2, generator=gen) * 10 ** (i - 2))  # gradients over 4 decades
                for i in range(fp8["steps"])]
    sc = {"x": [1.0, [0.0] * fp8["history"]], "w": [1.0, [0.0] * fp8["history"]], "g": [1.0, [0.0] * fp8["history"]]}

    def delayed(name, t, dt):
        s, h = sc[name]
        q = cast(t, s, dt)
        h = [t.abs().max().item()] + h[:-1]
        m = max(h)
        sc[name] = [top[dt] / m / 2 ** fp8["margin"] if m > 0 else 1.0, h]
        return q.float() / s
    steps = []
    for x, g in layer_in:
        xd, wd = delayed("x", x, e4), delayed("w", w, e4)
        gd = delayed("g", g, e5)
        steps.append((xd @ wd.t(), gd @ wd, gd.t() @ xd))
    return casts, stream, scales, qs, hist, w, layer_in, steps


def task_fp8(ctx, target, fp8=FP8, seed=SEED):
    import torch

    casts, stream, scales, qs, hist, w, layer_in, steps = _fp8_reference(fp8, seed)
    seam = seams.load(LAB, target)
    out = ctx.partial
    dtypes = {str(torch.float8_e4m3fn): torch.float8_e4m3fn, str(torch.float8_e5m2): torch.float8_e5m2}

    def cast_part():
        bad, nan = [], 0
        for i, (x, s, dt, want) in enumerate(casts):
            q = seam.to_fp8(x, s, dtypes[dt])
            if q.dtype != dtypes[dt]:
                return {"dtype": str(q.dtype), "want_dtype": dt}
            _crosscheck.keep(ctx, "fp8_cast", f"cast{i}", q.view(torch.uint8))  # every byte, as the check
            got = q.view(torch.uint8).tolist()
            nan += int((~torch.isfinite(q.float())).sum())
            if got != want:
                wrong = sum(a != b for ra, rb in zip(got, want) for a, b in zip(ra, rb))
                bad.append({"dtype": dt, "scale": s, "wrong": wrong, "of": x.numel()})
        return {"bad": bad[:3], "cases": len(casts), "nan": nan}
    out["cast"], out["cast_error"] = ctx.attempt(cast_part)

    def delayed_part():
        sc = seam.DelayedScaler(torch.float8_e4m3fn, history=fp8["history"], margin=fp8["margin"])
        rows = []
        for i, x in enumerate(stream):
            q, s = sc.cast(x)
            rows.append({"scale": float(s), "want": scales[i], "bytes_ok": q.view(torch.uint8).tolist() == qs[i]})
            _crosscheck.keep(ctx, "fp8_delayed_scaling", f"call{i}.scale", float(s), rtol=2 * FP8_TOL)
            _crosscheck.keep(ctx, "fp8_delayed_scaling", f"call{i}.bytes", q.view(torch.uint8))
        history = [float(a) for a in sc.amax_history]
        _crosscheck.keep(ctx, "fp8_delayed_scaling", "history", history, rtol=2 * FP8_TOL)
        return {"rows": rows, "history": history, "want_history": hist}
    out["delayed"], out["delayed_error"] = ctx.attempt(delayed_part)

    def linear_part():
        layer = seam.Fp8Linear(w, history=fp8["history"], margin=fp8["margin"])
        diffs = []
        for i, ((x, g), (y_w, dx_w, dw_w)) in enumerate(zip(layer_in, steps)):
            xl = x.clone().requires_grad_()
            layer.weight.grad = None
            y = layer(xl)
            y.backward(g)
            for name, t in (("output", y), ("input_grad", xl.grad), ("weight_grad", layer.weight.grad)):
                if t is not None:  # each relative to its own largest value, as the check
                    _crosscheck.keep(ctx, "fp8_linear", f"step{i}.{name}", t.detach(), rtol=2 * FP8_TOL)
            diffs.append([(a.detach() - b).abs().max().item() / max(b.abs().max().item(), 1e-30) if a is not None
                          and a.shape == b.shape else float("inf") for a, b in ((y, y_w), (xl.grad, dx_w),
                                                                                 (layer.weight.grad, dw_w))])
        exact = (layer_in[-1][0] @ w.t())
        return {"diffs": diffs, "fp8_vs_fp32": ((steps[-1][0] - exact).norm() / exact.norm()).item()}
    out["linear"], out["linear_error"] = ctx.attempt(linear_part)
    return out


TASKS = {"probe": task_probe, "memory": task_memory, "amp": task_amp, "timing": task_timing, "fp8": task_fp8,
         "fast_measure": task_fast_measure, "fast_predict": task_fast_predict}
