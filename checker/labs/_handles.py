"""Which collectives a training step launched, and when each was waited on: overlap and completeness read from the
order of events, not from a clock (worker side: imports torch).

    log = HandleLog(comm)        # comm: the run's CommBytes, which sees every spelling of a collective
    log.mark("backward"); loss.backward(); log.mark("step"); opt.step(); log.mark("end")
    log.close()
    log.phases("backward", "step", "end") -> {"backward": {...}, "step": {...}, "unwaited": [...]}

A collective started with async_op=True returns a handle; the caller's wait() (or get_future(), the other way to
wait) is when it blocks. A collective started without async_op blocks at once. So "backward never waited for its
communication" reads: between the marks around backward, no synchronous collective and no wait(); and "step()
returns with every bucket complete" reads: every handle launched since backward began was waited before "end".
Two ranks on two shared CPU cores cannot show overlap in a timing (backward and gloo share the cores); the order
of these events is the same on any machine.
"""
from __future__ import annotations


class HandleLog:
    def __init__(self, comm):
        import torch.distributed as dist

        self.events: list[tuple] = []
        self._handles: list = []  # kept alive: an id() is only unique while its object lives
        self._comm, self._work = comm, dist.Work
        self._wait, self._future = self._work.wait, self._work.get_future
        log = self

        def wait(work, *args, **kwargs):
            log._waited(work)
            return log._wait(work, *args, **kwargs)

        def get_future(work):
            log._waited(work)
            return log._future(work)
        self._work.wait, self._work.get_future = wait, get_future
        comm.observer = self._launched

    def _launched(self, op: str, result) -> None:
        if result is not None:
            self._handles.append(result)
            if type(result).wait is not self._work.wait:  # a subclass's own wait (labs/common/staging.StagedWork)
                self._watch(result)
        self.events.append(("launch", op, id(result) if result is not None else None))

    def _watch(self, work) -> None:
        """The handle's own wait and get_future, recorded on the instance (a Python subclass has a __dict__)."""
        for name in ("wait", "get_future"):
            own = getattr(work, name)

            def recorded(*args, _own=own, **kwargs):
                self._waited(work)
                return _own(*args, **kwargs)
            try:
                setattr(work, name, recorded)
            except AttributeError:
                return

    def _waited(self, work) -> None:
        self.events.append(("wait", id(work)))

    def mark(self, name: str) -> None:
        self.events.append(("mark", name))

    def close(self) -> None:
        self._work.wait, self._work.get_future = self._wait, self._future
        self._comm.observer = None

    def phases(self, *marks: str) -> dict:
        """Per phase from marks[i] to marks[i+1] (the last occurrence of marks[0] starts the window): the collectives
        launched in it, how many blocked inside it (synchronous, or waited before the phase ended), and the ops of the
        handles never waited by the last mark."""
        start = max(i for i, e in enumerate(self.events) if e == ("mark", marks[0]))
        at = {m: next(i for i in range(start, len(self.events)) if self.events[i] == ("mark", m)) for m in marks}
        out, waits = {}, {}
        for i in range(start, at[marks[-1]]):
            if self.events[i][0] == "wait":
                waits.setdefault(self.events[i][1], i)
        for a, b in zip(marks, marks[1:]):
            launched = [(i, e) for i, e in enumerate(self.events[at[a]:at[b]], at[a]) if e[0] == "launch"]
            blocked = [op for i, (_, op, h) in launched if h is None or waits.get(h, at[b]) < at[b]]
            out[a] = {"launched": [op for _, (_, op, _) in launched], "blocked": blocked}
        out["unwaited"] = [e[1] for i, e in enumerate(self.events[start:at[marks[-1]]], start)
                           if e[0] == "launch" and e[2] is not None and e[2] not in waits]
        return out
