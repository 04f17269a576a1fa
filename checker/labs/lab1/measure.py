"""Lab 1's measuring runs (worker side): one side of the speed ratio (task_speed), the meter against the checker's
clock (task_measure), model-state bytes (task_memory), and the input pipeline's stall (task_pipeline). The checks
that read them are in checks.py."""
from __future__ import annotations

import copy
import statistics
import time
from contextlib import contextmanager

from checker import seams
from checker.labs._common import clock
from checker.labs.lab1 import LAB
from checker.labs.lab1.setup import (
    BATCH,
    COST_RATIO,
    METER_LOAD_MATMULS,
    METER_STEPS,
    METER_WARMUP,
    PIPE_BASELINE,
    PIPE_STEPS,
    PIPE_WARMUP,
    SEED,
    SEQ,
    SPEED_STEPS,
    SPEED_WARMUP,
    SPEED_WINDOWS,
    _setup,
    _step_in,
)


def _queued_step(model, opt, sched, batch):
    """The checker's own plain step (the lab's, as the README states it), leaving the device's work queued (no
    .item()): what a meter that forgets to synchronise mis-times on a GPU. Returns the loss tensor."""
    import torch

    opt.zero_grad(set_to_none=True)
    _, loss = model(*batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss


def _plain_step(model, opt, sched, batch) -> float:
    """The checker's own step, done on any device when it returns (.item() waits for it)."""
    return _queued_step(model, opt, sched, batch).item()


def task_speed(ctx, target, seed=SEED):
    """One side of the speed ratio, in a process of its own: the graded code's train_step (the learner's; in the
    reference's run, which never imports the learner's code, the reference's) in SPEED_WINDOWS windows, each
    begun when the checker gives this run its turn and timed by the checker (checker/relay.py). Every step's loss
    goes back: the timed steps must train the model exactly as the reference's do."""
    import torch

    from labs.common import dist as cdist

    seam = seams.load(LAB, target)
    env, data, model, opt, sched, sampler = _setup(torch.manual_seed, seed)
    step = _step_in(env, seam.train_step)
    batches = [data.batch(sampler.next_ids(), SEQ, env.device) for _ in range(SPEED_STEPS)]

    def seeded(k, b):  # each step from its own seed: what a step draws (dropout) is the same, whatever it wasted
        torch.manual_seed(seed + k)
        return step(model, opt, sched, b)

    losses = [seeded(k, b) for k, b in enumerate(batches[:SPEED_WARMUP])]
    for _ in range(SPEED_WINDOWS):
        ctx.turn()
        for b in batches:
            losses.append(seeded(len(losses), b))
        cdist.synchronize(env.device)
    ctx.turn()  # the last window ends when the checker hears this
    return {"losses": [float(x) for x in losses], "tokens": BATCH * SEQ * SPEED_STEPS}


def _device_load(device):
    """On a GPU, a square fp32 matrix whose METER_LOAD_MATMULS matmuls (outside autocast, TF32 off: plain FP32)
    add 2 x 2 x 8192^3 = 2.2 TFLOP per metered step, ~33 ms at an H100's 67 TFLOP/s, in 2 kernels: the host
    then launches steps far faster than the device runs them, so a meter without a synchronize reads launch
    time (~half the device's window: the launch queue holds several steps) instead of device time. None on
    CPU: there every op finishes before the call returns, so any meter's clock is the device's."""
    import torch

    from labs.common import dist as cdist

    return torch.randn(8192, 8192, device=device) if cdist.is_async(device) else None


# The window ends at the last step() call, not when the rate is read: read again METER_IDLE_S after the last call,
# the rate must be the same number. 0.3 s is about the window's own length here (8 steps of ~25 ms + 0.08 s of
# waits), so a window that ends at the read is ~half as fast, far over METER_TOL; the reference reads the same float.
METER_IDLE_S = 0.3


@contextmanager
def _as_if_gpu(waits: list):
    """While inside: torch reports a GPU, and each torch.cuda.synchronize (what cdist.synchronize calls for a GPU
    device) or torch.accelerator.synchronize adds one to waits[-1] instead of running."""
    import torch

    def counted(*args, **kwargs):
        waits[-1] += 1

    patched = [(torch.cuda, "synchronize", counted), (torch.cuda, "is_available", lambda: True)]
    if hasattr(torch, "accelerator"):
        patched.append((torch.accelerator, "synchronize", counted))
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patched]
    for mod, name, fn in patched:
        setattr(mod, name, fn)
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


def _meter_early(ctx, seam, device) -> list[dict]:
    """The rate of a warmup_steps=2 meter read after 0, 1 and 2 calls, no training between (~0 s): the window holds
    no step yet, so nan each time (the contract's 'no measurement yet', which 0 would hide)."""
    meter, early = seam.ThroughputMeter(device, warmup_steps=2), []
    for k in range(3):
        if k:
            meter.step(1000)
        rate, err = ctx.attempt(lambda: meter.tokens_per_s)
        early.append({"calls": k, "rate": repr(rate), "nan": isinstance(rate, float) and rate != rate, "error": err})
    return early


def _meter_waits(seam) -> list[int]:
    """The device waits in each of 4 calls of a warmup_steps=2 meter told its device is a GPU (faked: the waits are
    counted, not run). On CPU there is no queue, so a clock read without a wait is right there by luck only."""
    import torch

    waits = []
    with _as_if_gpu(waits):
        meter = seam.ThroughputMeter(torch.device("cuda", 0), warmup_steps=2)
        for _ in range(4):
            waits.append(0)
            meter.step(1000)
    return waits


def task_measure(ctx, target):
    """Meter accuracy, alone (it times things); the checker's step profiled (information)."""
    from labs.common import dist as cdist

    seam = seams.load(LAB, target)
    out = {}

    # The checker's step profiler splits the checker's own steps into phases (information, not graded).
    import torch

    from labs.common import precision
    from labs.common.metrics import device_peak_or_none, flops_per_token
    from labs.instruments.profiler import StepProfiler
    env, data, model, opt, sched, sampler = _setup(torch.manual_seed, SEED)
    prof = StepProfiler(env.device).attach(model, opt)
    ref_step = _step_in(env, _plain_step)
    for _ in range(12):
        prof.begin_step()
        with prof.phase("data"):
            batch = data.batch(sampler.next_ids(), SEQ, env.device)
        ref_step(model, opt, sched, batch)
        prof.end_step()
    prof.detach()
    # The learner's meter watches the checker's steps, which leave their work queued (no .item(), nothing else
    # synchronises), so only the meter's own synchronise makes its clock the device's. The checker's clock is
    # the device's own: an event after each step (CPU: the checker's host clock, the same thing there).
    meter, out["meter_error"] = ctx.attempt(lambda: seam.ThroughputMeter(env.device, warmup_steps=METER_WARMUP))
    load, stamps = _device_load(env.device), []
    for tokens, extra_s in METER_STEPS:
        batch = data.batch(sampler.next_ids(), SEQ, env.device)
        with precision.autocast(env.device, precision.current()):
            _queued_step(model, opt, sched, batch)
        for _ in range(METER_LOAD_MATMULS if load is not None else 0):
            load @ load
        time.sleep(extra_s)  # steps of different lengths (as a loader's first batches or an eval step make them)
        if not out["meter_error"]:
            _, out["meter_error"] = ctx.attempt(lambda tokens=tokens: meter.step(tokens))
        stamps.append(cdist.stamp(env.device) if env.device.type == "cuda" else clock())
    if not out["meter_error"]:
        tps, out["meter_error"] = ctx.attempt(lambda: meter.tokens_per_s)
        window = sum(t for t, _ in METER_STEPS[METER_WARMUP:])
        out["meter"] = {"meter_tps": tps, "steps": len(METER_STEPS) - METER_WARMUP,
                        "clock_tps": window / cdist.seconds_between(stamps[METER_WARMUP - 1], stamps[-1])}
        time.sleep(METER_IDLE_S)  # idle after training: the window closed at the last call
        later, _ = ctx.attempt(lambda: meter.tokens_per_s)
        out["meter"].update(idle_s=METER_IDLE_S, later_tps=later)
    if not out["meter_error"]:
        out["meter_early"], out["meter_error"] = ctx.attempt(lambda: _meter_early(ctx, seam, env.device))
        # a meter that cannot run on the faked GPU (it asks torch.cuda for more than a wait) is not judged on it
        out["meter_waits"], out["meter_waits_error"] = ctx.attempt(lambda: _meter_waits(seam))
    cdist.synchronize(env.device)
    peak, why = device_peak_or_none(env.device, cdist.device_name(env.device),
                                    precision.peak_key(precision.current(), env.device))
    out["profile"] = {**prof.summary(), "peak_flops": peak, "peak_note": why, "precision": precision.current(),
                      "flops_per_token": flops_per_token(model.cfg, SEQ), "tokens_per_step": BATCH * SEQ}
    return out


# what memory_reported reads of each of model_state_bytes' answers, kept for the reference's run to judge
MEMORY_READ = {"memory": ("params", "grads", "optimizer", "total"), "memory_no_grads": ("grads",),
               "memory_bf16": ("params",)}


def task_memory(ctx, target):
    """Model-state bytes, in a run of its own (no timing in it): the learner's model_state_bytes after one of the
    checker's steps (weights, .grad, AdamW's moments and step counts), then with no .grad at all, then on a bf16 copy
    with no optimizer state. The truth it is compared with (Ψ and the tensor count) is taken in this process, so what
    the check reads is also kept: the reference's run of this task (memory@ref) counts the same model itself."""
    import torch

    from checker.labs import _crosscheck

    seam = seams.load(LAB, target)
    env, data, model, opt, sched, sampler = _setup(torch.manual_seed, SEED)
    _plain_step(model, opt, sched, data.batch(sampler.next_ids(), SEQ, env.device))
    out = {}
    params = list(model.parameters())
    out["truth"] = {"psi": sum(p.numel() for p in params), "tensors": len(params)}
    out["memory"], out["memory_error"] = ctx.attempt(lambda: seam.model_state_bytes(model, opt))
    if not out["memory_error"]:  # and with no .grad at all (zero_grad(set_to_none=True)): grads are not weights
        opt.zero_grad(set_to_none=True)
        out["memory_no_grads"], out["memory_error"] = ctx.attempt(lambda: seam.model_state_bytes(model, opt))
    if not out["memory_error"]:  # a bf16 copy, 2 B per parameter, no .grad, no optimizer state yet
        half = copy.deepcopy(model).to(torch.bfloat16)
        out["memory_bf16"], out["memory_error"] = ctx.attempt(
            lambda: seam.model_state_bytes(half, torch.optim.SGD(half.parameters(), lr=0.1)))
    if not out["memory_error"]:
        for part, keys in MEMORY_READ.items():
            got = out[part] if isinstance(out[part], dict) else {}
            _crosscheck.keep(ctx, "memory_reported", part, [got.get(k) for k in keys],
                             why="Your counts matched the checker's, taken in your run: does your code change what "
                                 "the model's parameters, a tensor's size or the optimizer's state look like?")
    return out


def task_pipeline(ctx, target):
    """The learner's make_loader over the checker's dataset, iterated by the checker's loop: how long
    does the checker's own step wait for each batch? An in-process pipeline (what num_workers=0 does) is timed
    in the same run, for comparison."""
    import torch
    from torch.utils.data import default_collate

    from labs.common import dist as cdist
    from labs.common.pipeline import WindowDataset

    seam = seams.load(LAB, target)
    env, data, model, opt, sched, sampler = _setup(torch.manual_seed, SEED)
    n = PIPE_WARMUP + PIPE_STEPS
    ids = [list(map(int, sampler.next_ids())) for _ in range(8 + PIPE_BASELINE + n)]
    times = []
    for b in ids[:8]:  # calibrate: this machine's step, now
        t0 = clock()
        _plain_step(model, opt, sched, data.batch(b, SEQ, env.device))
        times.append(clock() - t0)
    step_s = statistics.median(times[3:])
    dataset = WindowDataset(data.directory, SEQ, cost_s=COST_RATIO * step_s / BATCH)

    def stall(batches, id_lists, warmup):
        waits, totals = [], []
        for k, b in enumerate(id_lists):
            t0 = clock()
            try:
                x, y = next(batches)
            except StopIteration:
                raise RuntimeError(f"make_loader stopped after {k} of {len(id_lists)} batches") from None
            t1 = clock()
            _plain_step(model, opt, sched, (x, y))  # .item() inside: the step is done on any device
            t2 = clock()
            want = data.batch(b, SEQ)
            if not (torch.equal(x.cpu(), want[0]) and torch.equal(y.cpu(), want[1])):
                raise ValueError(f"batch {k} from make_loader is not the samples of batch {k} of `batches`, "
                                 "in order (shape, order or content differ)")
            if k >= warmup:
                waits.append(t1 - t0)
                totals.append(t2 - t0)
        return {"stall": sum(waits) / sum(totals), "wait_ms": 1e3 * statistics.fmean(waits),
                "step_ms": 1e3 * statistics.fmean(totals)}

    base_ids, mine = ids[8:8 + PIPE_BASELINE], ids[8 + PIPE_BASELINE:]
    in_process = (tuple(t.to(env.device) for t in default_collate([dataset[i] for i in b])) for b in base_ids)
    out = {"baseline": stall(in_process, base_ids, 2), "cost_ms": 1e3 * dataset.cost_s, "calib_step_ms": 1e3 * step_s}
    ctx.partial.update(out)
    # Work done on the training thread stalls the model whenever it runs, also inside make_loader before the
    # timed steps (every batch built up front): the dataset counts the samples this thread prepared.
    dataset.prepared_here = 0
    loader = iter(seam.make_loader(dataset, iter(mine), env.device))
    out["learner"] = stall(loader, mine, PIPE_WARMUP)
    out["learner"]["on_training_thread"] = dataset.prepared_here
    out["learner"]["samples"] = BATCH * len(mine)
    cdist.synchronize(env.device)
    return out
