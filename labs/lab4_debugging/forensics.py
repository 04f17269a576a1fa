# GENERATED from solutions/lab4_debugging/forensics.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""Forensics: read what the ranks recorded, and name the rank that went wrong.

A hung job tells you little: every rank times out, each in whatever collective it happened to be in, and the
first rank to report an error is rarely the one at fault. What does tell is the flight recorder: every rank keeps
its last collectives (which one, in what order, on what shapes and dtypes), and dumps them when the job ends.
Lay the ranks' records side by side by sequence number and the first place they disagree is where the job broke.

    python -m labs.lab4_debugging.desync order          # a faulty job -> runs/lab4/dumps/order/rank0..2
    python -m torch.distributed.flight_recorder.fr_trace runs/lab4/dumps/order --prefix rank   # torch's analyser
    python -m labs.lab4_debugging.forensics runs/lab4/dumps/order                              # yours
    python -m labs.lab4_debugging.linkprobe && python -m labs.lab4_debugging.forensics --link runs/lab4/link
    python -m labs.lab4_debugging.memleak logits && \
        python -m labs.lab4_debugging.forensics --memory runs/lab4/memory/logits.pickle

The checker runs the faulty jobs itself, with the faulty rank, step and collective, the slow link, the leak's sizes
moved (hidden variants), and grades what your functions say about the evidence IT produced.
"""
from __future__ import annotations

import pickle
import re
import sys
from pathlib import Path

KINDS = ("op", "size", "dtype", "missing")


def load_dump(path) -> tuple[int, dict]:
    """(rank, the recorder's dump) from one file. The rank is in the file's name (rank<R>, as fr_trace expects):
    the dump itself does not say which rank wrote it."""
    m = re.search(r"(\d+)$", Path(path).name)
    if not m:
        raise ValueError(f"{path}: a dump's file name ends in its rank (rank0, rank1, ...)")
    with open(path, "rb") as f:
        return int(m[1]), pickle.load(f)


def find_desync(paths: list[str]) -> dict:
    """Where the ranks of one job first stopped agreeing on their collectives.

    `paths`: one flight-recorder dump per rank (the pickles torch writes; load_dump reads one). Each dump holds that
    rank's entries: `collective_seq_id` (1, 2, ... per process group, on every rank: the k-th collective of the
    group), `profiling_name` ("gloo:all_reduce"), `input_sizes`, `input_dtypes`, `time_created_ns`, ... Only the
    last TORCH_FR_BUFFER_SIZE entries (a ring: a dump may begin at any sequence number), and point-to-point ops
    among them (`is_p2p`: a send or a recv, on two ranks only, with its own `p2p_seq_id`: not a collective).

    Returns {"rank": R, "seq": S, "kind": K}: S the smallest sequence number at which the ranks' records disagree,
    R the rank that diverged there (the odd one out, never one that merely waited for it), K what disagreed:
    "op" (a different collective), "size" (same collective, other shapes), "dtype" (same shapes, other dtypes), or
    "missing" (R never issued collective S, which its peers did).
    """
    raise NotImplementedError("TODO(lab4): Returns the first disagreement in the ranks' collective records and the one "
                              "rank that caused it, whatever timing the hang left in the dumps: the first rank to time "
                              "out, the rank with the most or fewest entries and rank 0 are each sometimes not it. A "
                              "silent mismatch (the job went on) counts as much as a hang, and it may be far from the "
                              "last entries. (hints: checker hint lab4 forensics.find_desync)")
    return {"rank": None, "seq": None, "kind": None}  # the ranks agree on every recorded collective


PROBE = re.compile(r"probe (send|recv) (\d+)->(\d+) (\d+) B$")


def probe_spans(path) -> list[tuple[int, int, int, float]]:
    """(src, dst, bytes, seconds) of every probe transfer in one rank's profiler trace (Chrome trace JSON: complete
    events, "ph": "X", with "dur" in microseconds)."""
    import json

    with open(path) as f:
        events = json.load(f)["traceEvents"]
    spans = []
    for e in events:
        m = PROBE.match(str(e.get("name", "")))
        if m and e.get("ph") == "X":
            spans.append((int(m[2]), int(m[3]), int(m[4]), float(e["dur"]) / 1e6))
    return spans


def slow_rank(paths: list[str]) -> dict:
    """The rank behind a slow link, and that link's rate.

    `paths`: one profiler trace per rank from linkprobe.py (probe_spans reads one): every pair of ranks sent a
    buffer both ways, each transfer a "probe send/recv SRC->DST BYTES B" span on both ends.

    Returns {"rank": R, "gbps": G}: R the rank whose link is slow, G its rate in GB/s (10^9 bytes/s, as busbw is
    printed in bandwidth.py), measured from the transfers.
    """
    raise NotImplementedError("TODO(lab4): Returns the one rank all of whose transfers are slow (not merely a rank in "
                              "the slowest pair) and that link's rate in GB/s, 10^9 bytes per second, within a quarter "
                              "of the rate the checker set. (hints: checker hint lab4 forensics.slow_rank)")


def find_memory_leak(snapshot: dict, source: str) -> dict | None:
    """The line of a training script whose allocations outlive their step, and how fast they pile up.

    `snapshot`: a memory snapshot as torch.cuda.memory._snapshot() returns it (memory_history.load reads a .pickle),
    taken after some steps of a loop that ran with the history recording. Its `device_traces[0]` lists the
    allocator's events, oldest first: `action` ("alloc", "free_requested", "free_completed", "segment_alloc",
    "segment_free"), `addr` (an address is reused once freed), `size` in bytes, and `frames`, the Python stack of the
    allocating call, innermost first: [{"filename", "line", "name"}]. `source`: the training script's file, as the
    frames name it.

    Returns {"file": source, "line": L, "bytes_per_step": N}: L the line of `source` whose allocations are still
    alive at the end and grow with every step (one step: one pass through L), N how many bytes one pass through L
    adds to what stays alive. None when no line of `source` grows: memory allocated once and kept (the optimizer's
    state) or still held by the step in progress is no leak.
    """
    raise NotImplementedError("TODO(lab4): Returns the line of `source` (not of torch or the model, which `source` "
                              "calls) whose surviving allocations grow with every pass through it, and the bytes one "
                              "pass leaves alive: not the line of the largest allocation, not the bytes in total. None "
                              "for a loop whose memory is flat. (hints: checker hint lab4 forensics.find_memory_leak)")


def main(argv=None) -> int:
    """`python -m labs.lab4_debugging.forensics DIR`: find_desync on the dumps in DIR (files rank0, rank1, ...);
    `... --link DIR`: slow_rank on linkprobe.py's traces in DIR; `... --memory FILE [SCRIPT]`: find_memory_leak on
    a memory snapshot of SCRIPT (default: memleak.py, which wrote it)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    if argv[0] == "--link":  # linkprobe.py's traces
        folder = Path(argv[1])
        paths = sorted(str(p) for p in folder.glob("trace_rank*.json"))
        print(f"{len(paths)} traces in {folder}: {slow_rank(paths)}")
        return 0
    if argv[0] == "--memory":  # a memory snapshot (memleak.py's, or one of yours)
        with open(argv[1], "rb") as f:
            snapshot = pickle.load(f)
        source = argv[2] if len(argv) > 2 else str(Path(__file__).with_name("memleak.py"))
        print(f"{argv[1]}: {find_memory_leak(snapshot, str(Path(source).resolve()))}")
        return 0
    folder = Path(argv[0])
    paths = sorted(str(p) for p in folder.glob("rank*") if re.search(r"\d+$", p.name))
    print(f"{len(paths)} dumps in {folder}: {find_desync(paths)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
