"""A crash inside a checkpoint write, landed on purpose: the checker's own wrapper of torch.save.

Installed by a worker task before the learner's code is imported (so `torch.save` and `from torch import save`
both reach it). Armed, the next torch.save call serialises its object in memory, writes the first half of the bytes
to the destination the learner gave (a path or an open file), flushes them to disk, reports, waits for every rank
to get there, cues the kill and sleeps: the SIGKILL lands with the learner's file half-written, exactly as a
preemption during a save leaves it. A save that writes to a temporary name and renames it once complete leaves the
previous checkpoint whole; one that writes in place leaves a truncated file where the checkpoint was.
"""
from __future__ import annotations

import io
import os
import time


class HeldSave:
    def __init__(self, ctx, out: dict):
        import torch

        self._torch, self._orig, self._ctx, self._out = torch, torch.save, ctx, out
        self.armed = False
        torch.save = self._save

    def _save(self, obj, f, *args, **kwargs):
        if not self.armed:
            return self._orig(obj, f, *args, **kwargs)
        self.armed = False
        buf = io.BytesIO()
        self._orig(obj, buf, *args, **kwargs)
        data = buf.getvalue()
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
            self._out["held_path"] = getattr(f, "name", "an open file")
        self._out["held"] = True
        self._ctx.write(self._out)
        import torch.distributed as dist
        if dist.is_initialized():
            dist.barrier()  # every rank is inside its own write before the kill (or in the checker's barrier after)
        self._ctx.cue("saved")
        time.sleep(3600)

    def uninstall(self) -> None:
        if self._torch.save == self._save:
            self._torch.save = self._orig
