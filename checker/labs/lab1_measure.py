"""Lab 1's measuring runs (worker side): the speed ratio, the meter against the checker's clock, model-state
bytes (task_measure), and the input pipeline's stall (task_pipeline). The checks that read them are in
checker/labs/lab1.py and lab1_eval.py."""
from __future__ import annotations

import statistics
import time

from checker import seams
from checker.labs._common import clock
from checker.labs._windows import Windows
from checker.labs.lab1_setup import (
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
    _setup,
    _step_in,
)

LAB = "lab1"


def _queued_step(model, opt, sched, batch) -> None:
    """One reference step that leaves the device's work queued (no .item()): what a meter that forgets to
    synchronise mis-times on a GPU."""
    import torch

    opt.zero_grad(set_to_none=True)
    _, loss = model(*batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()


def _device_load(device):
    """On a GPU, a square fp32 matrix whose METER_LOAD_MATMULS matmuls (outside autocast, TF32 off: plain FP32)
    add 2 x 2 x 8192^3 = 2.2 TFLOP per metered step, ~33 ms at an H100's 67 TFLOP/s, in 2 kernels: the host
    then launches steps far faster than the device runs them, so a meter without a synchronize reads launch
    time (~half the device's window: the launch queue holds several steps) instead of device time. None on
    CPU: there every op finishes before the call returns, so any meter's clock is the device's."""
    import torch

    from labs.common import dist as cdist

    return torch.randn(8192, 8192, device=device) if cdist.is_async(device) else None


def task_measure(ctx, target, windows=6, steps=8):
    """Speed ratio (interleaved A B B A ...), meter accuracy, model-state bytes. Each part alone,
    so an unfinished part fails only its own check."""
    from labs.common import dist as cdist

    seam, ref = seams.load(LAB, target), seams.load(LAB, "solutions")
    out = {}

    def speed():
        import torch
        env, data, *learner = _setup(torch.manual_seed, SEED)
        _, _, *reference = _setup(torch.manual_seed, SEED)
        batches = [data.batch(learner[3].next_ids(), SEQ, env.device) for _ in range(steps)]
        fns = {"learner": (_step_in(env, seam.train_step), learner),
               "reference": (_step_in(env, ref.train_step), reference)}
        for fn, (model, opt, sched, _) in fns.values():
            for b in batches[:2]:
                fn(model, opt, sched, b)  # warm-up
        timed = Windows()  # the ratio is computed by the checker's parent from these (checker/labs/_windows.py)
        for w in range(windows):
            for who in (("learner", "reference") if w % 2 == 0 else ("reference", "learner")):
                fn, (model, opt, sched, _) = fns[who]
                t0 = clock()
                for b in batches:
                    fn(model, opt, sched, b)
                cdist.synchronize(env.device)
                timed.add(who, t0, BATCH * SEQ * steps)
        return {"windows": timed.spans}

    out["speed"], out["speed_error"] = ctx.attempt(speed)

    # The checker's step profiler splits reference steps into phases (information, not graded).
    import torch

    from labs.common import precision
    from labs.common.metrics import device_peak_or_none, flops_per_token
    from labs.instruments.profiler import StepProfiler
    env, data, model, opt, sched, sampler = _setup(torch.manual_seed, SEED)
    prof = StepProfiler(env.device).attach(model, opt)
    ref_step = _step_in(env, ref.train_step)
    for _ in range(12):
        prof.begin_step()
        with prof.phase("data"):
            batch = data.batch(sampler.next_ids(), SEQ, env.device)
        ref_step(model, opt, sched, batch)
        prof.end_step()
    prof.detach()
    # The learner's meter watches reference steps that leave their work queued (no .item(), nothing else
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
    cdist.synchronize(env.device)
    peak, why = device_peak_or_none(env.device, cdist.device_name(env.device),
                                    precision.peak_key(precision.current(), env.device))
    out["profile"] = {**prof.summary(), "peak_flops": peak, "peak_note": why, "precision": precision.current(),
                      "flops_per_token": flops_per_token(model.cfg, SEQ), "tokens_per_step": BATCH * SEQ}
    params = list(model.parameters())
    out["truth"] = {"psi": sum(p.numel() for p in params), "tensors": len(params)}
    out["memory"], out["memory_error"] = ctx.attempt(lambda: seam.model_state_bytes(model, opt))
    if not out["memory_error"]:  # and with no .grad at all (zero_grad(set_to_none=True)): grads are not weights
        opt.zero_grad(set_to_none=True)
        out["memory_no_grads"], out["memory_error"] = ctx.attempt(lambda: seam.model_state_bytes(model, opt))
    return out


def task_pipeline(ctx, target):
    """The learner's make_loader over the checker's dataset, iterated by the checker's loop: how long
    does the reference step wait for each batch? An in-process pipeline (what num_workers=0 does) is timed
    in the same run, for comparison."""
    import torch
    from torch.utils.data import default_collate

    from labs.common import dist as cdist
    from labs.common.pipeline import WindowDataset

    seam, ref = seams.load(LAB, target), seams.load(LAB, "solutions")
    env, data, model, opt, sched, sampler = _setup(torch.manual_seed, SEED)
    n = PIPE_WARMUP + PIPE_STEPS
    ids = [list(map(int, sampler.next_ids())) for _ in range(8 + PIPE_BASELINE + n)]
    times = []
    for b in ids[:8]:  # calibrate: this machine's reference step, now
        t0 = clock()
        ref.train_step(model, opt, sched, data.batch(b, SEQ, env.device))
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
            ref.train_step(model, opt, sched, (x, y))  # .item() inside: the step is done on any device
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
