"""The checker's own process around learner code: `python -m checker.worker --lab lab1 --task NAME ...`.

The checker starts this (directly or under torchrun), never the learner's script. It imports the
learner's functions through the lab's seam, runs the task, and writes what it measured to
OUT.rank<R> as JSON. Learner exceptions become a structured error (type, message, the learner's
file:line, and the TODO text for an unfinished starter) instead of a traceback to grep.
Results go to the checker over the run's pipe (checker/channel.py), opened before learner code is
imported; after the final one the worker leaves with os._exit, so no atexit handler or leftover thread of
learner code runs after it. On SIGUSR1 every thread's Python stack goes to OUT.stacks.rank<R>: that is how
a hang is shown; a fatal signal (a segfault in an extension) writes the stacks of the crash to the log.
Limits (address space, file size) are set here, soft = hard, before learner code is imported.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from checker import channel, limits


class Context:
    """What a task may do besides compute: report results, drop a cue file for the harness."""

    def __init__(self, out: Path, rank: int, workdir: Path, root: Path, nonce: str):
        self.out, self.rank, self.workdir, self.root = out, rank, workdir, root
        self._nonce = nonce
        self._sender = channel.Sender(out, rank, nonce)
        self.partial: dict = {}  # what a task measured before it raised is still reported
        self.run = out.name.removesuffix(".result.json")  # the run's name in the lab's plan
        self.twin_of: str | None = None  # a run of the reference's judging that run's kept values (_crosscheck)
        self.crosscheck: dict = {}  # check -> how far each value the learner's run kept is from this run's

    def attempt(self, fn):
        """(fn(), None), or (None, error) if the learner's code in fn raised: one part fails alone."""
        try:
            return fn(), None
        except Exception as exc:  # noqa: BLE001
            return None, describe(exc, self.root)

    def write(self, result: dict, final: bool = False) -> None:
        """To the checker's pipe (a later result replaces an earlier one until the final one); a run started
        without a pipe (a test calling a task) writes OUT.rank<R>."""
        if _SEND(self._sender, result=result, final=final):
            return
        path = Path(f"{self.out}.rank{self.rank}")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({**result, "nonce": self._nonce}))
        os.replace(tmp, path)

    def turn(self) -> None:
        """Wait until the checker gives this run its next timed window (checker/relay.py); at once in a run that
        takes no turns."""
        _TURN(self._sender)

    def cue(self, name: str) -> None:
        if self.rank == 0:
            (self.workdir / name).touch()

    def await_kill(self, result: dict, keep_training, cue: str = "saved") -> None:
        """After a checkpoint: report what was measured, cue the harness (the file `cue`, the run's kill_on), and
        keep training so the SIGKILL lands mid-step, as a preemption would; then wait for it."""
        self.write(result)
        import torch.distributed as dist
        if dist.is_initialized():
            dist.barrier()  # every rank has reported before rank 0 cues the kill
        self.cue(cue)
        keep_training()
        time.sleep(3600)


# Bound before any learner code is imported: a learner's __init__.py that wraps Context.write or
# Sender.send does not change what the worker's final report sends.
_WRITE, _SEND, _TURN = Context.write, channel.Sender.send, channel.Sender.turn


def describe(exc: BaseException, root: Path) -> dict:
    """Where in the learner's code it went wrong, in one line a learner can act on."""
    frames = traceback.extract_tb(exc.__traceback__)
    prefixes = tuple(str(b / part) + os.sep for b in {root, root.resolve()} for part in ("labs", "solutions"))
    learner = [f for f in frames if f.filename.startswith(prefixes)]  # not checker/labs/: that's ours
    core = (f"{os.sep}common{os.sep}", f"{os.sep}instruments{os.sep}")  # the course's own code, not the learner's lab
    own = [f for f in learner if not any(c in f.filename for c in core)]
    where = ""
    if learner:
        f = (own or learner)[-1]
        rel = f.filename
        for base in (root, root.resolve()):
            try:
                rel = Path(f.filename).relative_to(base)
                break
            except ValueError:
                continue
        where = f"{rel}:{f.lineno} in {f.name}"
    msg = str(exc)
    return {"type": type(exc).__name__, "message": msg[:2000], "where": where, "t": time.time(),
            "todo": msg if isinstance(exc, NotImplementedError) and "TODO(" in msg else None,
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lab", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--target", choices=["labs", "solutions"], required=True)
    ap.add_argument("--root", required=True, help="folder that holds labs/ and solutions/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--args", default="{}")
    a = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", 0))
    out, root = Path(a.out), Path(a.root)
    stacks = open(f"{out}.stacks.rank{rank}", "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    faulthandler.enable(file=sys.stderr, all_threads=True)  # SIGSEGV/SIGBUS/SIGFPE/SIGABRT: where, in the log
    limits.apply()
    sys.path.insert(0, str(root))  # the graded tree's labs/ and solutions/ win over any installed copy
    if a.target == "solutions":
        _course_labs_package(root)

    # A fork of the run server inherits the server's Python and NumPy generator states: reseed them from the
    # OS as a fresh interpreter does, so that an unseeded generator differs between two runs here too.
    import random
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()

    # Taken out of the environment before any learner code runs (their children won't see it either).
    nonce = os.environ.pop("CHECKER_NONCE", "")
    ctx = Context(out, rank, Path(json.loads(a.args).get("workdir", out.parent)), root, nonce)
    channel.SENDER = ctx._sender  # checker/labs/_common.clock() reports its readings through it
    from checker import labs
    from checker.labs import _crosscheck
    lab = labs.worker(a.lab)
    from checker import reach
    reach.guard(reach.hidden(root, a.lab, a.target))  # before the learner's code: no reading the reference
    kwargs = json.loads(a.args)
    kwargs.pop("workdir", None)
    ctx.twin_of = kwargs.pop("twin_of", None)
    _watch(ctx, a.lab, a.target, root)
    try:
        if ctx.twin_of is not None and not _crosscheck.anything_kept(ctx.workdir, ctx.twin_of):
            return _leave(ctx, {"crosscheck": {}, "skipped": "the graded run kept nothing"}, 0)
        result = lab.TASKS[a.task](ctx, a.target, **kwargs)
        if ctx.twin_of is not None:
            result = {**(result or {}), "crosscheck": ctx.crosscheck}
        staged = sys.modules.get("labs.common.staging")  # the host-memory fallback's cost, shown under the run
        if staged is not None and staged.ACTIVE is not None and isinstance(result, dict):
            result = {**result, "host_staging": dict(staged.STATS)}
        if a.target == "labs":  # an import of the reference the learner's code caught and swallowed still counts
            from checker import seams
            seams.check_own_code(a.lab)
    except BaseException as exc:  # noqa: BLE001 - anything the learner's code raises is a result
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _leave(ctx, {**ctx.partial, "error": describe(exc, root)}, 3)
    return _leave(ctx, result or {}, 0)


def _course_labs_package(root: Path) -> None:
    """A run of the reference's imports the course's core from the graded tree (labs.common, labs.instruments), so
    Python would first run that tree's labs/__init__.py: a learner's file (the course's is empty), code of the
    learner's beside the reference it is timed against. The package is made here, its modules found under the
    tree's labs/ as before, and that file is never run."""
    import types

    if "labs" in sys.modules:
        return
    pkg = types.ModuleType("labs")
    pkg.__path__ = [str(root / "labs")]
    pkg.__package__ = "labs"
    sys.modules["labs"] = pkg


def _watch(ctx: Context, lab: str, target: str, root: Path) -> None:
    """A learner call stuck for watchdog.STUCK_S ends the run with that as its error (checker/watchdog.py)."""
    from checker import seams, watchdog

    folder = seams.SEAMS[lab].folder

    def stuck(err: dict) -> None:
        _WRITE(ctx, {**ctx.partial, "error": err}, final=True)
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(3)
    watchdog.watch(sorted({str(base / target / folder) for base in (root, root.resolve())}), stuck)


def _leave(ctx: Context, result: dict, code: int) -> int:
    """Send the final result, then exit at once where a pipe took it: learner code does not run again."""
    _WRITE(ctx, result, final=True)
    if ctx._sender.fd is None:
        return code
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
