"""The step profiler, the all-reduce timeline, the trace window and its picture: units on CPU (seconds)."""
import json
import time

import pytest
import torch

from labs.common import dist as cdist
from labs.common.data import TokenFile, ensure_corpus
from labs.common.model import build_model
from labs.common.optim import make_optimizer, make_scheduler
from labs.common.pipeline import WindowDataset
from labs.instruments.collectives import CollectiveTimeline, Span, intersect, overlap_fraction, subtract, union
from labs.instruments.profiler import CpuUtilisation, StepProfiler
from labs.instruments.trace import COMM, TraceWindow, overlap_from_trace, read_trace
from solutions.lab1_baseline import train_step

CPU = torch.device("cpu")


def _tiny():
    torch.manual_seed(0)
    model = build_model("tiny")
    opt = make_optimizer(model)
    return model, opt, make_scheduler(opt, warmup=2, total=10)


def test_phases_add_up_to_the_step_and_a_slow_batch_is_an_input_stall():
    model, opt, sched = _tiny()
    data = TokenFile.open(ensure_corpus(256))
    prof = StepProfiler(CPU).attach(model, opt)
    for i in range(3):
        prof.begin_step()
        with prof.phase("data"):
            batch = data.batch(range(16 * i, 16 * i + 16), 64)
            time.sleep(0.05 if i == 2 else 0)  # the last batch is late
        train_step(model, opt, sched, batch)
        rec = prof.end_step()
        assert rec["forward_s"] > 0 and rec["backward_s"] > 0 and rec["optimizer_s"] > 0 and rec["comm_s"] is None
        parts = sum(rec[k] for k in ("data_s", "forward_s", "backward_s", "optimizer_s", "other_s"))
        assert parts == pytest.approx(rec["step_s"]) and rec["other_s"] >= 0
    assert rec["data_s"] >= 0.05 and rec["input_stall"] == pytest.approx(rec["data_s"] / rec["step_s"])
    assert rec["input_stall"] > prof.records[0]["input_stall"]
    s = prof.summary(skip=1)
    assert s["steps"] == 2 and s["comm_s"] is None and 0 < s["input_stall"] < 1
    prof.detach()
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_interval_arithmetic():
    assert union([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    assert intersect([(0, 10)], [(2, 3), (5, 12)]) == [(2, 3), (5, 10)]
    assert subtract([(0, 10)], [(2, 3), (9, 12)]) == [(0, 2), (3, 9)]


def test_overlap_counts_only_communication_while_the_host_computed():
    # all-reduce in flight 0..10; backward computes 0..8 but waits for it from 6 to 8: hidden 0..6
    span = Span(launch=0.0, nbytes=4, done=10.0, waits=[(6.0, 8.0)])
    assert overlap_fraction([span], [(0.0, 8.0)]) == pytest.approx(0.6)
    blocking = Span(launch=9.0, nbytes=4, done=10.0, waits=[(9.0, 10.0)])  # naive DDP: after backward, blocking
    assert overlap_fraction([blocking], [(0.0, 8.0)]) == 0.0
    assert overlap_fraction([], [(0.0, 8.0)]) is None


def test_cpu_utilisation_tells_busy_from_blocked():
    meter = CpuUtilisation()
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass
    busy = meter.read()
    time.sleep(0.05)
    assert busy > meter.read()


def test_window_dataset_is_the_token_file_at_a_cpu_price():
    data = TokenFile.open(ensure_corpus(256))
    ds = WindowDataset(data.directory, 64, cost_s=0.002)
    t0 = time.thread_time()
    x, y = ds[7]
    assert time.thread_time() - t0 >= 0.002
    bx, by = data.batch([7], 64)
    assert torch.equal(x, bx[0]) and torch.equal(y, by[0]) and x.dtype == torch.int64
    import threading
    helper = threading.Thread(target=ds.__getitem__, args=(8,))
    helper.start(), helper.join()
    assert ds.prepared_here == 1  # only what the training thread itself prepared


@pytest.fixture
def one_rank_group(tmp_path):
    """A process group of one rank on this process (a file store: no port), so collectives really run."""
    import torch.distributed as dist

    _, backend = cdist.pick_device("cpu")
    dist.init_process_group(backend, store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_bucketed_trace_is_valid_json_with_the_phases_and_the_all_reduces(tmp_path, one_rank_group):
    from labs.instruments.trace_plot import plot_traces
    from solutions.lab2_ddp import BucketedDDP

    timeline = CollectiveTimeline()
    try:
        model, opt, _ = _tiny()
        ddp = BucketedDDP(model, bucket_cap_mb=0.05)
        prof = StepProfiler(CPU).attach(model, opt)
        data = TokenFile.open(ensure_corpus(256))
        with TraceWindow(tmp_path / "trace.json", CPU, wait=1, warmup=1, active=2) as trace:
            for i in range(4):
                prof.begin_step()
                timeline.start()
                with prof.phase("data"):
                    x, y = data.batch(range(16 * i, 16 * i + 16), 64)
                opt.zero_grad(set_to_none=True)
                ddp(x, y)[1].backward()
                with prof.phase("comm"):
                    ddp.finish_gradient_synchronization()
                opt.step()
                rec = prof.end_step()
                spans = timeline.stop()
                trace.step()
        assert rec["comm_s"] > 0 and len(spans) == len(ddp.buckets)
        assert all(s.done is not None and s.done >= s.launch and s.waits for s in spans)  # async: waited once each
        assert 0 <= overlap_fraction(spans, prof.host_spans("backward")) <= 1
    finally:
        timeline.uninstall()
    assert trace.written == tmp_path / "trace.json"
    json.loads(trace.written.read_text())  # opens as JSON (what Perfetto and chrome://tracing read)
    events = read_trace(trace.written)
    names = {e["name"] for e in events}
    assert {"data", "forward", "backward", "comm", "optimizer"} <= names
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2 and "c10d::allreduce_" in names
    assert any(COMM.search(n) for n in names)  # the collective itself, on the backend's thread
    assert 0 <= overlap_from_trace(events) <= 1
    plot_traces([trace.written], out=tmp_path / "trace.png")
    assert (tmp_path / "trace.png").stat().st_size > 10_000
