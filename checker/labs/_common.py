"""What every lab's checks share: the Check description and turning a run's error into a result."""
from __future__ import annotations

from dataclasses import dataclass

from checker.report import CheckResult


@dataclass(frozen=True)
class Check:
    name: str
    what: str  # what the check proves, one line (checker list)
    hint: str  # the concept and where to look, shown when it fails


def error_result(check: Check, err: dict, unit: str = "") -> CheckResult:
    """A failed check from a run that raised, crashed or hung, with the evidence."""
    kind, where = err.get("type", "Error"), err.get("where") or ""
    at = f" ({where})" if where else ""
    if err.get("todo"):
        msg, details = f"not written yet: {err['todo']}{at}", ""
    elif kind == "Timeout":
        msg = f"hung: {err['message']}; killed. Where each thread was stuck is shown with -v."
        details = err.get("stacks", "")
    elif kind == "Crash":
        msg, details = f"the run died: {err['message']}", err.get("log", "")
    else:
        msg, details = f"{kind}: {err.get('message', '')}{at}", err.get("traceback", "")
    return CheckResult(check.name, False, unit=unit, message=msg, hint=check.hint, details=details)


# ---------------------------------------------------------------- worker-side helpers
def probe(lab: str, target: str, vocab: int = 256) -> dict:
    """Does the learner's package import, is the device there, is the data written?"""
    import os

    from checker import seams
    from labs.common.data import ensure_corpus
    from labs.common.dist import pick_device

    seams.load(lab, target)
    device, _ = pick_device(os.environ.get("COURSE_DEVICE", "auto"))
    ensure_corpus(vocab)
    return {"device": device.type}


def digest(named_tensors) -> str:
    """A fingerprint of (name, tensor) pairs' exact bytes (e.g. model.named_parameters()):
    equal digests mean bit-identical weights."""
    import hashlib

    h = hashlib.sha256()
    for name, p in named_tensors:
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class CollectiveRecorder:
    """Counts and timestamps every torch.distributed.all_reduce the learner's code calls.

    Installed by the worker *before* it imports learner code, so `dist.all_reduce(...)` and
    `from torch.distributed import all_reduce` both reach it. The checker reads its own record;
    it never asks the learner's wrapper how many collectives it launched.
    """

    def __init__(self):
        import torch.distributed as dist

        self.calls: list[tuple[float, int]] | None = None  # (perf_counter, numel) while recording
        self._orig = dist.all_reduce
        dist.all_reduce = self._all_reduce

    def _all_reduce(self, tensor, *args, **kwargs):
        import time

        if self.calls is not None:
            self.calls.append((time.perf_counter(), tensor.numel()))
        return self._orig(tensor, *args, **kwargs)

    def start(self) -> None:
        self.calls = []

    def stop(self) -> list[tuple[float, int]]:
        calls, self.calls = self.calls or [], None
        return calls
