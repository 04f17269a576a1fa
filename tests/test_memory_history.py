"""The memory-history recorder (labs/instruments/memory_history.py) on the CPU: a known pattern of allocations
recorded exactly, in the format torch's own snapshot tools (torch.cuda._memory_viz) read."""
import base64
import json
import pickle
import re
import sys

import pytest
import torch
from torch.cuda import _memory_viz

from labs.instruments.memory_history import MemoryHistory, load, save


def _line() -> int:
    return sys._getframe(1).f_lineno


def _record():
    """4000 B allocated and freed, 2000 B and 40 B allocated and kept; a view and an in-place op in between."""
    with MemoryHistory("cpu") as h:
        a = torch.empty(1000); at_a = _line()  # noqa: E702  the allocating line is this one
        b = torch.ones(250, dtype=torch.float64); at_b = _line()  # noqa: E702
        b.view(25, 10).add_(1)  # a view and an in-place op: no new storage
        del a
        c = torch.zeros(10); at_c = _line()  # noqa: E702
        snap = h.snapshot()
    return snap, (b, c), (at_a, at_b, at_c)


def test_a_known_pattern_is_recorded_exactly():
    snap, _, (at_a, at_b, at_c) = _record()
    trace = snap["device_traces"][0]
    assert [(e["action"], e["size"]) for e in trace] == [
        ("segment_alloc", 4000), ("alloc", 4000), ("segment_alloc", 2000), ("alloc", 2000),
        ("free_requested", 4000), ("free_completed", 4000), ("segment_free", 4000),
        ("segment_alloc", 40), ("alloc", 40)]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert [(e["frames"][0]["filename"], e["frames"][0]["line"]) for e in allocs] == [
        (__file__, at_a), (__file__, at_b), (__file__, at_c)]  # innermost first: the line that asked
    assert allocs[0]["frames"][0]["name"] == "_record" and allocs[0]["frames"][1]["name"] == (
        "test_a_known_pattern_is_recorded_exactly")
    assert trace[5]["addr"] == allocs[0]["addr"]  # the free names the address it frees
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)
    # what is allocated when the snapshot is taken: b and c, a segment each (no caching allocator on the CPU)
    blocks = [(s["total_size"], s["blocks"][0]["size"], s["blocks"][0]["state"], s["blocks"][0]["frames"][0]["line"])
              for s in sorted(snap["segments"], key=lambda s: -s["total_size"])]
    assert blocks == [(2000, 2000, "active_allocated", at_b), (40, 40, "active_allocated", at_c)]


def test_torch_s_snapshot_tools_read_it(tmp_path):
    snap = load(save(_record()[0], tmp_path / "snap.pickle"))
    text = _memory_viz.trace(snap)
    assert text.startswith("Device 0") and "cudaMalloc" in text and "del " in text  # every action understood
    assert "segments: 2\ntotal_reserved: 2.0KiB\ntotal_allocated: 2.0KiB" in _memory_viz.segsum(snap)  # 2000 + 40 B
    lines = _memory_viz.memory(snap, format_flamegraph=lambda lines: lines).splitlines()
    assert sorted(int(x.rsplit(" ", 1)[1]) for x in lines) == [40, 2000] and "test_memory_history.py" in lines[0]
    for plot in (_memory_viz.trace_plot, _memory_viz.segment_plot):  # the pages https://pytorch.org/memory_viz draws
        html = plot(snap)
        files = json.loads(re.search(r"const local_files = (\[.*?\])\n", html)[1])
        assert pickle.loads(base64.b64decode(files[0]["base64"])) == snap


def test_the_ring_buffer_keeps_the_newest_events():
    with MemoryHistory("cpu", max_entries=4) as h:
        keep = [torch.empty(n) for n in (1, 2, 3)]
        snap = h.snapshot()
    assert len(keep) == 3 and [(e["action"], e["size"]) for e in snap["device_traces"][0]] == [
        ("segment_alloc", 8), ("alloc", 8), ("segment_alloc", 12), ("alloc", 12)]  # float32: 4 bytes each
    assert len(snap["segments"]) == 3  # what is allocated is kept whole, the history is not


@pytest.mark.parametrize("kind", ["logits", "losses", "cache", "clean"])
def test_find_memory_leak_names_the_growing_line_and_its_stair(kind):
    from solutions.lab4_debugging import forensics, memleak
    torch.set_num_threads(1)
    c = memleak.Case(kind, batch=2, seq=16, steps=4)
    got = forensics.find_memory_leak(memleak.train(c), memleak.__file__)
    if kind == "clean":
        assert got is None
    else:
        assert got == {"file": memleak.__file__, "line": memleak.leak_line(kind),
                       "bytes_per_step": memleak.saved_bytes(c)}
