"""What the always-on step profiler costs: tokens/s with and without it, in one process (make bench).

    python -m bench.profiler_bench

Windows alternate A B A B ... (A: the bare loop, B: the same loop with StepProfiler attached: its hooks on
every parameter, the data phase, begin/end of step, the CPU clock), so both see the same machine; the
overhead is 1 - median(B/A) over adjacent pairs (a pair shares the machine's mood; run-to-run noise
here is ~15%, a pair's much less). The bookkeeping alone is also timed without a model: per step, the
clock reads and dict work the profiler adds, divided by a step's time, is the floor of the overhead.
"""
from __future__ import annotations

import json
import statistics
import time

import torch

from labs.common.data import BatchSampler, TokenFile, ensure_corpus
from labs.common.model import build_model
from labs.common.optim import make_optimizer, make_scheduler
from labs.instruments.profiler import StepProfiler
from solutions.lab1_baseline import train_step

CPU = torch.device("cpu")


def overhead(pairs: int = 15, steps: int = 10, batch: int = 16, seq: int = 64) -> dict:
    torch.manual_seed(0)
    data = TokenFile.open(ensure_corpus(256))
    model = build_model("tiny")
    opt = make_optimizer(model)
    sched = make_scheduler(opt, warmup=10, total=10_000)
    sampler = BatchSampler(data.num_windows(seq), batch)
    batches = [data.batch(sampler.next_ids(), seq) for _ in range(steps)]
    prof = StepProfiler(CPU)

    def window(profiled: bool) -> float:
        if profiled:
            prof.attach(model, opt)
        t0 = time.perf_counter()
        for b in batches:
            if profiled:
                prof.begin_step()
                with prof.phase("data"):
                    x = b
                train_step(model, opt, sched, x)
                prof.end_step()
            else:
                train_step(model, opt, sched, b)
        seconds = time.perf_counter() - t0
        prof.detach()
        return batch * seq * steps / seconds

    window(False), window(True)  # warm-up
    a, b = [], []
    for i in range(pairs):
        for profiled in ((False, True) if i % 2 == 0 else (True, False)):
            (b if profiled else a).append(window(profiled))
    ratio = statistics.median(y / x for x, y in zip(a, b))
    return {"pairs": pairs, "steps_per_window": steps, "tokens_per_s_without": round(statistics.median(a)),
            "tokens_per_s_with": round(statistics.median(b)), "overhead": round(1 - ratio, 4),
            "overhead_of_medians": round(1 - statistics.median(b) / statistics.median(a), 4),
            "bookkeeping_us_per_step": round(bookkeeping_us(len(list(model.parameters()))), 1)}


def bookkeeping_us(n_params: int, reps: int = 2000) -> float:
    """The profiler's own work per step with no model in the way: begin, a data phase, forward marks,
    one gradient-hook call per parameter, an optimizer phase, end."""
    prof = StepProfiler(CPU)
    t0 = time.perf_counter()
    for _ in range(reps):
        prof.begin_step()
        with prof.phase("data"):
            pass
        prof._forward_begin(None, None)
        prof._close("forward")
        prof._open("backward")
        prof._backward_queued = True  # no autograd engine here: mark the callback as queued
        for _ in range(n_params):
            prof._grad_ready(None)
        prof._backward_done()
        with prof.phase("optimizer"):
            pass
        prof.end_step()
    return 1e6 * (time.perf_counter() - t0) / reps


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(overhead(), indent=1))
