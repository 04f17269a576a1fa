"""A learner line that never returns, seen from inside the run, so a hang FAILs in seconds, not at the budget.

A thread of the worker looks at the main thread once a second. When the innermost frame it is running is the same
call of a function in the graded lab's own folder (labs/<lab>/ or solutions/<lab>/, never the course's core) at
every look for STUCK_S, that call is stuck: an endless loop (`while True: pass`) or a wait inside learner code
that nothing ends (a lock, a sleep). The run then ends with a "Stuck" error naming the line, as if it had raised.

What is never taken for a hang: a frame that calls anything in Python (torch's forward, backward, a collective's
wrapper, torch.compile's tracer) stops being the innermost one, and a collective that waits for a peer is torch's
frame, which the collective's own timeout ends (cdist.init). What is: one call of the lab's own code that runs
STUCK_S (10 s) on C calls alone (tensor ops in a Python loop, a sleep) without calling a Python function; no lab's
tiny model comes near (a step takes milliseconds, a loop over its ~30 parameters microseconds).
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback

STUCK_S = 10.0  # a learner call this long without calling anything: ~1,000x a tiny model's step (ms)
LOOK_S = 1.0


def watch(folders: list[str], on_stuck, stuck_s: float = STUCK_S, look_s: float = LOOK_S,
          until: threading.Event | None = None) -> threading.Thread:
    """Start the watching thread: on_stuck(error dict) is called from it once a call has been stuck stuck_s.
    `folders`: absolute paths of the graded lab's folder (a frame counts when its file is under one); `until`, when
    set, ends the watch (the worker's lasts as long as its process)."""
    prefixes = tuple(os.path.join(f, "") for f in folders)
    main = threading.main_thread().ident

    def loop():
        mark, since = None, 0.0  # the mark set on the frame innermost at the last look, and since when
        while not (until and until.is_set()):
            time.sleep(look_s)
            frame = sys._current_frames().get(main)
            if frame is None:
                return
            mine = frame.f_code.co_filename.startswith(prefixes)
            same = mine and mark is not None and frame.f_trace is mark
            if same and time.monotonic() - since >= stuck_s:
                on_stuck(_describe(frame, time.monotonic() - since))
                return
            if not same:
                # A call is recognised by a mark on its frame, not by a reference to it: holding the frame would
                # keep its locals (tensors) alive after it returns, and a memory check would count them. f_trace
                # is read only while a trace function runs (none in a graded run); a frame someone else traces
                # (a debugger) is left alone and never taken for stuck.
                mark, since = None, time.monotonic()
                if mine and (frame.f_trace is None or getattr(frame.f_trace, "_watchdog", False)):
                    mark = frame.f_trace = _marker()
            del frame

    t = threading.Thread(target=loop, name="checker-watchdog", daemon=True)
    t.start()
    return t


def _marker():
    def mark(frame, event, arg):  # a trace function that traces nothing
        return None
    mark._watchdog = True
    return mark


def _describe(frame, seconds: float) -> dict:
    code = frame.f_code
    where = f"{_rel(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
    return {"type": "Stuck", "where": where, "t": time.time(), "todo": None,
            "message": f"{where} ran {seconds:.0f} s without returning or calling anything: an endless loop, or a "
                       "wait that nothing ends; the run was ended there",
            "traceback": "".join(traceback.format_stack(frame))[-4000:]}


def _rel(path: str) -> str:
    parts = path.split(os.sep)
    for anchor in ("labs", "solutions"):
        if anchor in parts:
            return os.sep.join(parts[len(parts) - parts[::-1].index(anchor) - 1:])
    return path
