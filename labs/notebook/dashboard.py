"""A live dashboard for a training run, in a notebook cell: every rank's output, loss / tokens/s / memory
plots that follow the run's log.jsonl, and a Stop button that ends every rank.

    from labs.notebook.dashboard import command, launch, watch, grade_table

    run = launch(command("solutions.lab2_ddp.train", "--out", out, nproc=2), log=out / "log.jsonl", cwd=ROOT)
    records = run.wait()   # block until it ends (Run All, nbval), return read_log(log); an interrupt stops it
    run.stop()             # or, from a later cell / the button: SIGTERM every process, SIGKILL after a grace

    job = watch(log=..., text_log=..., stop=lambda: subprocess.run(["scancel", job_id]), done=job_finished)
    display(grade_table(RUNS / "grade.json", proc))   # `checker grade ... --json` as a table

Why a background thread: while a cell executes, the kernel handles no widget events, so a Stop button
only works after the cell has returned. `launch` returns at once and a thread keeps the widgets up to
date; `wait()` is there for "Run All" and for nbval (no browser: widgets print as text), and it turns
the notebook's interrupt (KeyboardInterrupt) into a stop. Without IPython (plain python, tests) no
widget is made: the same object collects lines, records and plot data, and `wait()` prints a summary.
Each run starts in its own session, so stopping it signals its process group (torchrun and its ranks),
plus any group a launcher below it made for itself (labs.instruments.proctree). What is shown, and how, is
labs.notebook.live_view.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

from labs.common.steplog import read_log
from labs.instruments import proctree

from .grade_table import GradeTable, grade_table  # re-exported: one import for the notebooks
from .live_view import LiveView, MiB, in_kernel, split_rank

__all__ = ["command", "launch", "watch", "Run", "Watch", "grade_table", "GradeTable", "in_kernel", "split_rank"]

# torchrun --tee 3 copies every rank's stdout/stderr to ours, each line prefixed with this (global rank)
PREFIX_ENV = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}
_LIVE: weakref.WeakSet = weakref.WeakSet()  # runs to stop if the kernel exits while they go


def command(module: str, *args, nproc: int = 1, torchrun: bool | None = None) -> list[str]:
    """`python -m module args`, or under torchrun on `nproc` ranks (a free port: --standalone; every
    rank's output copied to ours with a [rankN]: prefix: --tee 3). torchrun=None: only when nproc > 1."""
    if torchrun if torchrun is not None else nproc > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                "--tee", "3", "-m", module, *map(str, args)]
    return [sys.executable, "-m", module, *map(str, args)]


class Run(LiveView):
    """A command started by the dashboard, in its own session; its merged stdout/stderr is the output."""

    def __init__(self, cmd, log=None, cwd=None, env: dict | None = None, title: str | None = None,
                 parse=None, show: bool | None = None, grace_s: float = 3.0, **kw):
        self.cmd = [str(c) for c in cmd]
        ms = [i for i, c in enumerate(self.cmd[:-1]) if c == "-m"]  # the last `-m X`: the module the ranks run
        super().__init__(title or (self.cmd[ms[-1] + 1] if ms else Path(self.cmd[0]).name), log, parse, show, **kw)
        self.cwd, self.env, self.grace_s = cwd, env or {}, grace_s
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self.signalled: list[int] = []  # every pid stop() signalled (tests check they are gone)
        self._seen: set[tuple] = set()  # (pid, start time) of every process the run had

    def start(self) -> "Run":
        # Unbuffered: a learner's print() shows up when it runs, not when a buffer fills. (Then print() is two
        # writes, text and newline: processes sharing our pipe may interleave them; torchrun --tee does not.)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **PREFIX_ENV, **self.env}
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        _LIVE.add(self)
        return self._begin()

    def _pump(self) -> None:
        for raw in self.proc.stdout:
            self._add_line(raw.decode(errors="replace"))

    def _sample(self) -> None:
        t = time.monotonic() - self.t0
        self._seen.update(filter(None, map(proctree.identity, proctree.descendants(self.proc.pid))))
        self._version += 1
        # Before a launcher has started its ranks the root is all there is; once a rank was seen, ranks only.
        fallback = "torch.distributed.run" not in self.cmd and not any(k.startswith("rank") for k in self.rss)
        for label, rss in proctree.rank_rss(self.proc.pid, fallback=fallback).items():
            ts, ms = self.rss.setdefault(label, ([], []))
            ts.append(t)
            ms.append(rss / MiB)

    def _sleep(self) -> None:
        try:
            self.proc.wait(self.poll_s)
        except subprocess.TimeoutExpired:
            pass

    def _source_done(self) -> bool:
        if self.proc.poll() is None:
            return False
        self._reader.join(timeout=2)  # the pipe may stay open if a process outlived the launcher: _end
        return True

    def _end(self) -> None:
        # The launcher exited; anything of its tree still there (a rank it failed to reap, a process in a
        # session of its own) goes now, as a cluster's job epilogue would do.
        stray = set(proctree.group(self.proc.pid))  # the launcher's group outlives it while a member lives
        stray |= {ident[0] for ident in self._seen if proctree.same(ident)}  # that very process, not a pid reused
        for pid in stray:
            proctree.end_tree(pid, grace_s=1.0)
        self._reader.join(timeout=2)
        self.returncode = self.proc.returncode
        self.t_end = time.monotonic()
        self.status = ("stopped" if self.stop_requested else
                       "finished" if self.returncode == 0 else f"failed (exit {self.returncode})")

    def stop(self) -> None:
        """End every process of the run: SIGTERM (torchrun passes it to its ranks), SIGKILL after grace_s."""
        if self.proc is None or self.finished or self.stop_requested:
            return
        self.stop_requested, self.status = True, "stopping"
        self.signalled = proctree.end_tree(self.proc.pid, self.grace_s, reap=self.proc.poll, leader=True)
        self.proc.wait()
        self._finished.wait(10)

    def last_words(self, n: int = 8) -> str:
        """Each rank's last lines, then the launcher's: the root cause is usually in a rank's, while the
        launcher's last lines are its own traceback ("ChildFailedError") and a summary of exit codes."""
        ranks = sorted({r for r, _ in self.lines if r is not None})
        parts = [f"--- rank {r}, last lines:\n" + "\n".join(self.output(r)[-n:]) for r in ranks]
        launcher = self.output(None)
        if launcher:
            parts.append(("--- the launcher, last lines:\n" if ranks else "--- last lines:\n")
                         + "\n".join(launcher[-(3 * n if ranks else 30):]))
        return "\n".join(parts)

    def wait(self, timeout: float | None = None, check: bool = True, tail: int | None = None) -> list[dict]:
        """Block until the run ends and return its step records (read_log of `log`; [] without one).
        check: raise when it failed (not when it was stopped). Prints a summary line, then the last `tail`
        lines of output (default: 3 where no widget shows them, else none)."""
        self._wait(timeout)
        secs = (self.t_end or time.monotonic()) - self.t0
        print(f"{self.title}: {self.status} in {secs:.1f} s" + (f"; {self.summary()}" if self.summary() else ""))
        tail = (0 if self.widget is not None else 3) if tail is None else tail
        if tail:
            print("\n".join(self.output()[-tail:]))
        if check and self.returncode and not self.stop_requested:
            raise RuntimeError(f"{self.title} failed (exit {self.returncode}).\n{self.last_words()}")
        return read_log(self.log) if self.log is not None and self.log.exists() else self.records()


class Watch(LiveView):
    """Follow a job the dashboard did not start (a Slurm job, another terminal's run): its text log and
    log.jsonl as they grow. stop: what the Stop button does (e.g. scancel); done: True once the job ended
    (e.g. it left squeue). After a stop the watch follows the job until done() or grace_s."""

    def __init__(self, log=None, text_log=None, stop: Callable[[], object] | None = None,
                 done: Callable[[], bool] | None = None, title: str = "job", parse=None,
                 show: bool | None = None, grace_s: float = 30.0, **kw):
        kw.setdefault("poll_s", 1.0)
        super().__init__(title, log, parse, show, **kw)
        self.text_log, self._stop_cb, self._done_cb, self.grace_s = (Path(text_log) if text_log else None,
                                                                   stop, done, grace_s)
        self._text_offset, self._text_partial, self._stop_t = 0, b"", None

    def _poll_source(self) -> None:
        if self.text_log is None:
            return
        try:
            if self.text_log.stat().st_size < self._text_offset:  # rewritten (a requeued job): from the top
                self._text_offset, self._text_partial = 0, b""
            with open(self.text_log, "rb") as f:
                f.seek(self._text_offset)
                chunk = f.read()
        except OSError:  # not there yet (a pending job)
            return
        self._text_offset += len(chunk)
        *whole, self._text_partial = (self._text_partial + chunk).split(b"\n")
        for line in whole:
            self._add_line(line.decode(errors="replace"))

    def _source_done(self) -> bool:
        if self._done_cb is not None and self._done_cb():
            return True
        if self._stop_t is not None:
            return self._done_cb is None or time.monotonic() - self._stop_t > self.grace_s
        return False

    def _end(self) -> None:
        self.status = "stopped" if self.stop_requested else "finished"

    def stop(self) -> None:
        if self.finished or self.stop_requested:
            return
        self.stop_requested, self.status = True, "stopping"
        if self._stop_cb is not None:
            self._stop_cb()
        self._stop_t = time.monotonic()

    def wait(self, timeout: float | None = None) -> list[dict]:
        """Block until done() (or a stop); return the step records."""
        self._wait(timeout)
        print(f"{self.title}: {self.status}" + (f"; {self.summary()}" if self.summary() else ""))
        return read_log(self.log) if self.log is not None and self.log.exists() else self.records()


def launch(cmd, log=None, **kw) -> Run:
    """Start `cmd` (see `command`) with a dashboard; returns at once. kw: cwd, env, title, parse, show,
    grace_s, poll_s, refresh_s (text), plot_s (the plots: at least this long between drawings)."""
    return Run(cmd, log, **kw).start()


def watch(log=None, text_log=None, **kw) -> Watch:
    """Follow a job someone else started; kw: stop, done, title, parse, show, grace_s, poll_s."""
    return Watch(log, text_log, **kw)._begin()


@atexit.register
def _stop_all() -> None:
    for d in list(_LIVE):
        if isinstance(d, Run) and not d.finished:
            d.stop()
