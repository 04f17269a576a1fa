"""A crash inside a checkpoint write, landed on purpose: the checker's own wrapper of torch.save.

Installed by a worker task before the learner's code is imported (so `torch.save` and `from torch import save`
both reach it). Armed, the next torch.save call serialises its object in memory, writes the first half of the bytes
to the destination the learner gave (a path or an open file), flushes them to disk, reports, waits for every rank
to get there, cues the kill and sleeps: the SIGKILL lands with the learner's file half-written, exactly as a
preemption during a save leaves it. A save that writes to a temporary name and renames it once complete leaves the
previous checkpoint whole; one that writes in place leaves a truncated file where the checkpoint was.

Options for checkpoints of several files. `min_bytes`: a save whose bytes are fewer goes through whole and the hold
waits for a bigger one (a rank's RNG file of a few KB passes; the file with the weights is held). `after`: the other
kill point, just after that bigger save: it goes through whole too, and the next save on the same rank, of any size, is
held (a save that writes the file with the weights last has none: the kill then lands after the save). `together` (the
default): each rank holds a write of its own and waits for every other before the cue; False: only some ranks write
(rank 0 writes the replicated state), and the rank that holds cues the kill itself, with no barrier: a barrier there
would release the other ranks from the learner's own, and let them go on as no killed job would; `grace_s` then delays
the cue, so that a peer whose save returns without waiting for this write has the time to report it. `cue`: the name
of the file that tells the harness to kill (its spec's kill_on; "saved", as Context.await_kill cues).
"""
from __future__ import annotations

import io
import os
import time

# What loading a truncated torch.save file raises (the zip's central directory is at its end; a legacy pickle runs out
# of input): a check's `symptoms` pattern for a resume that found the half-written file.
TORN = r"PytorchStreamReader|central directory|unexpected EOF|Ran out of input|invalid load key"


def last_complete(killed: list[dict]) -> tuple[int, bool]:
    """(the step of the last complete checkpoint, whether the kill landed inside a write), from the killed run's
    ranks' reports: a first save completed at `complete_at`, two steps later a second one was held and killed,
    so the first is the last complete; where no write could be held (no torch.save call), the kill came after the
    second save, which is then the last complete."""
    held = any(r.get("held") for r in killed)
    first = killed[0]["complete_at"]
    return (first if held else first + 2), held


def wrong_start(saved_at: int, held: bool, got, load: str = "load_checkpoint") -> str | None:
    """The failure message when a resume's load returned `got` (a step, or the steps the ranks returned) rather than
    the last complete checkpoint's step; None when it is right."""
    if got in (saved_at, [saved_at]):
        return None
    return (f"the last complete checkpoint is step {saved_at}"
            + (f" (the one of step {saved_at + 2} was killed half-written)" if held else "")
            + f"; {load} returned {'step ' if isinstance(got, int) else ''}{got}")


class HeldSave:
    def __init__(self, ctx, out: dict, min_bytes: int = 0, together: bool = True, cue: str = "saved",
                 after: bool = False, grace_s: float = 0.0):
        import torch

        self._torch, self._orig, self._ctx, self._out = torch, torch.save, ctx, out
        self.min_bytes, self.together, self.cue, self.after = min_bytes, together, cue, after
        self.grace_s = grace_s
        self.armed, self._big_saved = False, False
        torch.save = self._save

    def _save(self, obj, f, *args, **kwargs):
        if not self.armed:
            return self._orig(obj, f, *args, **kwargs)
        buf = io.BytesIO()
        self._orig(obj, buf, *args, **kwargs)
        data = buf.getvalue()
        if self.after and not self._big_saved:  # this one whole; the first save after the big one is held
            self._big_saved = len(data) >= self.min_bytes
            return self._orig(obj, f, *args, **kwargs)
        if not self.after and len(data) < self.min_bytes:
            return self._orig(obj, f, *args, **kwargs)
        self.armed = False
        half = data[:len(data) // 2]
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as fh:
                fh.write(half)
                fh.flush()
                os.fsync(fh.fileno())
            self._out["held_path"] = os.path.basename(os.fspath(f))
        else:
            f.write(half)
            f.flush()
            name = getattr(f, "name", None)  # an open temporary file's name is its full path
            self._out["held_path"] = os.path.basename(name) if isinstance(name, str) else "an open file"
        self._out["held"] = True
        self._hold()

    def _hold(self) -> None:
        """Report, cue the kill, and wait for it."""
        self._ctx.write(self._out)
        import torch.distributed as dist
        if not self.together:
            time.sleep(self.grace_s)  # time for a peer whose save does not wait for this write to return and say so
            (self._ctx.workdir / self.cue).touch()  # this rank's cue, whichever rank it is
        else:
            if dist.is_initialized():
                dist.barrier()  # every rank is inside its own write before the kill (or in the checker's barrier after)
            self._ctx.cue(self.cue)
        time.sleep(3600)

    def uninstall(self) -> None:
        if self._torch.save == self._save:
            self._torch.save = self._orig


class HeldDCPWrite:
    """The same crash for a DCP save (torch.distributed.checkpoint). Armed, the next FileSystemWriter.write_data
    writes this rank's shard files whole, reports, waits for every rank to get there, cues the kill and sleeps: the
    SIGKILL lands before DCP writes `.metadata`, its last file (the coordinator writes it once every rank's data is
    written). What is left is a folder of shards that no load can read: a save that publishes a folder (rename, then
    `latest`) only once it is complete still offers the previous one; one that names the new folder first does not.
    """

    def __init__(self, ctx, out: dict, cue: str = "saved"):
        from torch.distributed.checkpoint import FileSystemWriter

        self._cls, self._orig, self._ctx, self._out = FileSystemWriter, FileSystemWriter.write_data, ctx, out
        self.armed, self.cue = False, cue
        held = self

        def write_data(writer, *args, **kwargs):
            fut = held._orig(writer, *args, **kwargs)
            if held.armed:
                held.armed = False
                fut.wait()  # this rank's shards are on disk
                held._hold(os.path.basename(os.fspath(getattr(writer, "path", "?"))))
            return fut

        self._write_data = write_data
        FileSystemWriter.write_data = write_data

    def _hold(self, folder: str) -> None:
        import torch.distributed as dist

        self._out.update(held=True, held_path=folder)
        self._ctx.write(self._out)
        if dist.is_initialized():
            dist.barrier()  # every rank has written its shards (the gather that precedes .metadata never comes)
        self._ctx.cue(self.cue)
        time.sleep(3600)

    def uninstall(self) -> None:
        if self._cls.write_data is self._write_data:
            self._cls.write_data = self._orig


class PublishWatch:
    """Every moment a save renames, replaces or removes something under the watched roots is a moment a kill could
    land: right after each os.rename, os.replace and shutil.rmtree there (installed before the learner's code is
    imported), `latest`, where it exists, must name a folder holding DCP's `.metadata` (what a loader needs first).
    The first moment it did not is recorded in out["unpublished"]: the operation and what latest named."""

    def __init__(self, out: dict, roots):
        import shutil
        from pathlib import Path

        self._out, self.roots = out, [Path(r).resolve() for r in roots if r]
        self._orig = {(os, "rename"): os.rename, (os, "replace"): os.replace, (shutil, "rmtree"): shutil.rmtree}
        for (mod, name), fn in self._orig.items():
            setattr(mod, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def op(*args, **kwargs):
            result = fn(*args, **kwargs)
            paths = [os.path.abspath(os.fspath(a)) for a in args[:2] if isinstance(a, (str, os.PathLike))]
            self._look(f"{name}({', '.join(os.path.basename(p) for p in paths)})", paths)
            return result
        return op

    def _look(self, what: str, paths: list[str]) -> None:
        if "unpublished" in self._out:
            return
        for root in self.roots:
            if not any(p.startswith(str(root) + os.sep) for p in paths):
                continue
            latest = root / "latest"
            try:
                name = latest.read_text().strip()
            except OSError:
                continue  # no latest yet: nothing is offered
            if not (root / name / ".metadata").exists():
                self._out["unpublished"] = {"op": what, "latest": name,
                                            "exists": bool(name) and (root / name).is_dir()}

    def uninstall(self) -> None:
        for (mod, name), fn in self._orig.items():
            setattr(mod, name, fn)


class SlowRank:
    """The last rank (not rank 0) writes each torch.save file of its own (not DCP's shard files) `delay_s` late: a
    save whose rank 0 renames the folder without first waiting for every rank's part (a barrier) then publishes it
    without that part, or the slow rank's write finds its folder gone, every time rather than when a race fires."""

    def __init__(self, rank: int, world_size: int, delay_s: float = 0.5):
        import torch

        self._torch, self._orig = torch, torch.save
        if rank == 0 or rank != world_size - 1:
            return

        def save(obj, f, *args, **kwargs):
            name = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
            if isinstance(name, str) and not name.endswith(".distcp"):  # a file of its own (DCP's shards: no delay)
                time.sleep(delay_s)
            return self._orig(obj, f, *args, **kwargs)
        torch.save = save
