"""What every lab's checks share: the Check description, turning a run's error into a result, and the
checks this machine cannot run (NOT RUN, with how to run them)."""
from __future__ import annotations

import functools
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from checker import channel, placement, slurm
from checker.labs import _crosscheck
from checker.report import CheckResult

# Taken when the checker's lab module is imported, before any learner code: learner code that replaces
# time.perf_counter does not change the checker's clock.
_perf_counter = time.perf_counter


def clock() -> float:
    """The checker's clock for timings that decide a check. Each reading also goes to the checker's parent,
    which stamps its arrival with its own clock (checker/channel.py): a run whose readings span less time
    than the parent saw pass is refused, however the clock was changed."""
    t = _perf_counter()
    if channel.SENDER is not None:
        channel.SENDER.send(mark=t)
    return t


@dataclass(frozen=True)
class Check:
    name: str
    what: str  # what the check proves, one line (checker list)
    hint: str  # the concept and where to look, shown when it fails
    # The pristine starter runs this part on purpose (e.g. lab 1's input pipeline: slow, so the learner sees
    # the stall first); it fails on what the checker measures, not on a TODO.
    starter_runs: bool = False
    # What the check needs beyond a CPU and Python (keys of NEEDS): without it the check is NOT RUN.
    needs: tuple[str, ...] = ()
    # (pattern, hint): when a run of this check raised and the pattern is found in the error (type, message,
    # traceback), that hint replaces `hint`: aimed at the symptom seen, not at the check. Tried before SYMPTOMS.
    symptoms: tuple[tuple[str, str], ...] = ()
    # The runs (names in the lab's plan) whose results decide it: a grade with --only starts just those.
    runs: frozenset[str] = frozenset()
    # Every value it compares in the learner's run is judged again in a run of the reference's that never imported
    # the learner's code (checker/labs/_crosscheck.py): a PASS needs both.
    crosscheck: bool = False
    # evaluate(check, runs) -> CheckResult: the function the declaration is written on (see `declare`).
    evaluate: Callable | None = field(default=None, repr=False, compare=False)


def declare(registry: list[Check]) -> Callable:
    """A lab's `@check(name, what, hint, runs=..., ...)`: one declaration per check, on the evaluator that decides
    it, so the spec (what it proves, which runs it reads, the hint for a failure) and the verdict (the threshold and
    why, in the body) read as one. Each decorated evaluator joins `registry` in the order written."""
    def check(name: str, what: str, hint: str, *, runs=(), **more) -> Callable:
        def wrap(fn: Callable) -> Callable:
            @functools.wraps(fn)
            def evaluate(c, got_runs, *rest):
                return _crosscheck.judge(c, got_runs, fn(c, got_runs, *rest))
            registry.append(Check(name, what, hint, runs=frozenset(runs), evaluate=evaluate, **more))
            return fn
        return wrap
    return check


def runs_needed(checks) -> set[str]:
    """Every run the chosen checks read."""
    return set().union(*(c.runs for c in checks))


# Symptoms any lab's run can show, each with its most likely cause. A check's own symptoms come first.
SYMPTOMS: tuple[tuple[str, str], ...] = (
    (r"Expected all tensors to be on the same device|Expected .* to be on .*device",
     "Two tensors on different devices met in one op: create new tensors on the device of the ones they meet "
     "(the model's parameters or the batch), never on a fixed one."),
    (r"expected (scalar type|mat1 and mat2 to have the same dtype)|dtype mismatch|found dtype",
     "Two dtypes met in one op: a tensor kept its dtype where the rest of the step changed precision (or the "
     "other way round). Which tensor did you create or cast yourself?"),
    (r"Tensor cached during selective activation checkpoint has been mutated",
     "Your selective-recompute policy saves the output of an op that a later op changes in place: save only "
     "outputs nothing mutates (the matmuls'), recompute the rest."),
    (r"one of the variables needed for gradient computation has been modified by an inplace operation",
     "An in-place change (x += ..., .copy_(), .mul_()) hit a tensor backward still needs: do that update "
     "out of place, or after backward."),
    (r"Trying to backward through the graph a second time",
     "The same graph was backpropagated twice: a tensor from an earlier step (a loss, an output kept in a list) "
     "is part of this step's loss; detach what you keep across steps."),
    (r"Timed out waiting \d+ ?ms for (send|recv)|Connection closed by peer|Application timeout caused pair closure",
     "A rank waited in a collective that a peer never joined, or joined with another size: every rank must call "
     "the same collectives in the same order with the same shapes. Look for one behind a rank test (if rank == "
     "0), in a loop whose length differs per rank, or skipped on some ranks (a parameter without gradient)."),
    (r"does not require grad and does not have a grad_fn",
     "The loss is cut off from the parameters: something between them detached it (no_grad, .detach(), .item(), "
     "a new tensor built from values)."),
)


def _gpu_missing(device: str) -> str | None:  # the checker's own process never imports torch: ask the driver
    return None if Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") else "no NVIDIA GPU on this machine"


def _gloo_on_gpu(device: str) -> str | None:
    """Two ranks sharing one GPU talk over gloo (COURSE_BACKEND=gloo), and gloo moves only all-reduce and
    broadcast of CUDA tensors: its reduce-scatter, all-gather and send/recv take host memory, and given a
    GPU pointer fail ("writev ... Bad address") or hang. Measured on an H200, torch 2.11. The course's
    collective layer stages them through host memory there (labs/common/staging.py): labs 3 and 6 run every
    check that is not a speed ratio (`unstaged_collectives`); a check that declares this need is not run."""
    if os.environ.get("COURSE_BACKEND") == "gloo" and placement.uses_gpu(device):
        return ("COURSE_BACKEND=gloo with CUDA tensors: gloo carries only all-reduce and broadcast of GPU memory, "
                "and this check's runs reduce-scatter, all-gather or send/recv it")
    return None


def _staged(device: str) -> str | None:
    """The runs' collectives of GPU tensors go through host memory (labs/common/staging.py decides, as the runs
    will): a speed ratio against DDP would time the fallback's copies and lost overlap."""
    from labs.common import staging

    device_type = "cuda" if placement.uses_gpu(device) else "cpu"  # gloo on a GPU only where COURSE_BACKEND says
    return staging.why() if staging.wanted(os.environ, device_type, os.environ.get("COURSE_BACKEND", "")) else None


def _no_reference(device) -> str | None:
    """A class handout (`make handout`) has no solutions/: checks that compare with the reference's runs can't run."""
    root = Path(__file__).resolve().parents[2]
    return None if (root / "solutions" / "__init__.py").exists() else \
        "this copy of the course has no reference (solutions/): a class handout"


# need -> (why it is missing here, or None, given the grade's --device; how to run a check that needs it)
NEEDS = {
    "reference": (_no_reference, "your instructor grades this check, with the course's full copy "
                                 "(`checker grade LAB --submissions DIR`)"),
    "slurm": (lambda device: slurm.unavailable(), slurm.HINT_START),
    "root": (lambda device: None if os.geteuid() == 0 else "not root (network namespaces need it)",
             "grade as root: `sudo .venv/bin/checker grade ...`, or in a container where you are root"),
    "gpu": (_gpu_missing, "grade on a GPU node: `checker grade LAB --device cuda`"),
    "device_collectives": (_gloo_on_gpu, "grade on 2 GPUs with NCCL (unset COURSE_BACKEND; one rank per GPU), "
                           "or on the CPU: `--device cpu`"),
    "unstaged_collectives": (_staged, "time it on 2 GPUs with NCCL (unset COURSE_BACKEND; one rank per GPU), or on "
                             "the CPU (`--device cpu`, COURSE_HOST_STAGING unset)"),
}


def not_run(check: Check, why: str, how: str) -> CheckResult:
    """A check this machine cannot run: NOT RUN, why (message) and how to run it (hint); never passed."""
    return CheckResult(check.name, False, message=f"not run on this machine: {why}", hint=how, not_run=True)


def cannot_run(checks, device: str) -> dict[str, CheckResult]:
    """{name: NOT RUN result} for the checks whose needs this machine lacks (each need probed once). The
    checker asks before a lab's grade() runs, so a lab sees only the checks it can run."""
    missing = {need: NEEDS[need][0](device) for need in {n for c in checks for n in c.needs}}
    out = {}
    for c in checks:
        why = [(need, missing[need]) for need in c.needs if missing[need]]
        if why:
            out[c.name] = not_run(c, "; ".join(w for _, w in why), "; ".join(NEEDS[n][1] for n, _ in why))
    return out


def error_result(check: Check, err: dict, unit: str = "") -> CheckResult:
    """A failed check from a run that raised, crashed or hung, with the evidence."""
    kind, where = err.get("type", "Error"), err.get("where") or ""
    at = f" ({where})" if where else ""
    hint = symptom_hint(check, err)
    cause = "error"
    if err.get("todo"):
        msg, details, cause = f"not written yet: {err['todo']}{at}", "", "todo"
        if where:  # the TODO that stopped the run, which may be in another file than the check is about
            file, _, fn = where.partition(" in ")
            hint = f"first write {fn or 'the TODO'} ({file}): this check runs it. Then: {check.hint}"
    elif kind == "ReferenceImportError":
        msg, details = err.get("message", ""), ""
        hint = ("Write the lab in labs/ yourself; the checker compares your code against solutions/, so it never "
                "grades it.")
    elif kind == "Timeout":
        msg = (f"hung: {err['message']}; killed. Where each thread was stuck is shown with -v (in a class report: "
               "the frames of the learner's own code)")
        details, cause = err.get("stacks", ""), "hang"
    elif kind == "Crash":
        msg, details, cause = f"the run died: {err['message']}", err.get("log", ""), "crash"
    else:  # a Stuck (checker/watchdog.py) is a hang found from inside the run: its traceback is where it was
        msg, details = f"{kind}: {err.get('message', '')}{at}", err.get("traceback", "")
        cause = "hang" if kind == "Stuck" else "error"
    return CheckResult(check.name, False, unit=unit, message=msg, hint=hint, details=details, cause=cause)


def symptom_hint(check: Check, err: dict) -> str:
    """The hint for what a raising run showed: the first of the check's own symptoms, then the labs' common
    ones, whose pattern is found in the error; else the check's hint."""
    if err.get("todo") or err.get("type") in ("Timeout", "Crash", "ReferenceImportError"):
        return check.hint
    seen = f"{err.get('type', '')}: {err.get('message', '')}\n{err.get('traceback', '')}"
    for pattern, hint in (*check.symptoms, *SYMPTOMS):
        if re.search(pattern, seen):
            return f"{hint} If that is not it: {check.hint}" if check.hint else hint
    return check.hint


def StorageTracker():  # noqa: N802  a class made on first use: the checker's own process never imports torch
    """A dispatch mode that records every storage an op creates under it: {storage key: (weak ref, bytes)} in
    .refs. After a forward, the ones still alive are what something keeps (worker side: imports torch)."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Track(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.refs = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    s = t.untyped_storage()
                    self.refs.setdefault(s._cdata, (StorageWeakRef(s), s.nbytes()))
            return out
    return Track()


def take_turn(ctx, env) -> None:
    """The run's next timed window (checker/relay.py), on every rank of a run of several: every rank has finished the
    last one when rank 0 asks for it, and every rank starts it when rank 0 is given it (the relay stops and continues
    the whole run; the other ranks wait for rank 0 at the barriers). Worker side: imports torch."""
    import torch.distributed as dist

    from labs.common import dist as cdist

    ids = cdist.ddp_device_ids(env.device)
    dist.barrier(device_ids=ids)
    if env.rank == 0:
        ctx.turn()
    dist.barrier(device_ids=ids)


def grad_norm(model) -> float:
    """The 2-norm of every .grad of a model, in float64 (worker side: imports torch)."""
    import torch

    grads = [p.grad.detach().double().reshape(-1) for p in model.parameters() if p.grad is not None]
    return float(torch.cat(grads).norm()) if grads else 0.0


# ---------------------------------------------------------------- checker-side helpers (evaluators)
def first_error(runs, *names):
    for n in names:
        run = runs.get(n)
        if run is None:
            return {"type": "Crash", "message": f"run {n} did not start"}
        if run.killed_on_cue and run.results and not run.results[0].get("error"):
            continue  # killed on purpose after it reported
        err = run.error()
        if err:
            return err
    return None


def diverged_at(a: list[str], b: list[str], offset: int = 0) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first differs at step {offset + i + 1}: {float.fromhex(x):.6f} vs {float.fromhex(y):.6f}"
    return f"{len(a)} vs {len(b)} steps" if len(a) != len(b) else "losses equal, weights differ"


def part(runs, run: str, part: str):
    """(rank 0's result of one part of a run, the earliest error any rank hit in it): parts fail
    independently, and the rank that failed first is the root cause."""
    err = first_error(runs, run)
    if err:
        return None, err
    errors = [r[f"{part}_error"] for r in runs[run].results if r.get(f"{part}_error")]
    return runs[run].result.get(part), min(errors, key=lambda e: e.get("t", float("inf"))) if errors else None


def every_rank(runs, run: str, part: str):
    """(every rank's result of one part of a run, None), or (None, the earliest error: the rank that failed first,
    a peer's "closed by peer" after any first-hand error)."""
    r = runs.get(run)
    results = r.results if r else []
    if r and len(results) == r.nproc and all(x.get(part) is not None and not x.get(f"{part}_error") for x in results):
        return [x[part] for x in results], None
    # a rank's run-ending error (the watchdog's Stuck, a raise outside the parts) beside the part's: a peer it left
    # waiting reports only "closed by peer"
    errors = [e for x in results for e in (x.get(f"{part}_error"), x.get("error")) if e]
    if errors:
        return None, min(errors, key=lambda e: ("closed by peer" in e.get("message", ""), e.get("t", 0)))
    err = first_error(runs, run)
    if err is None:
        earlier = [v for x in results for k, v in x.items() if k.endswith("_error") and v]
        err = min(earlier, key=lambda e: e.get("t", 0)) if earlier else \
            {"type": "Crash", "message": f"{part} did not report on every rank"}
    return None, err


def run_info(runs) -> list[tuple[str, str]]:
    """How long each run took, and what staging its collectives through host memory cost where it did
    (labs/common/staging.py): information rows under the graded checks."""
    from labs.common.staging import summary

    rows = []
    for name, run in runs.items():
        rows.append((f"run {name}", f"{run.seconds:.1f} s" + (" (killed on cue)" if run.killed_on_cue else "")))
        staged = (getattr(run, "result", None) or {}).get("host_staging")
        if staged and staged.get("calls"):
            rows.append((f"run {name}: host staging", summary(staged)))
    return rows


def profile_info(label: str, prof: dict | None) -> list[tuple[str, str]]:
    """Information rows from a worker's StepProfiler summary (labs.instruments.profiler; torch-free here, the
    checker's own process never imports torch): where a step went, MFU, CPU utilisation."""
    if not prof or not prof.get("step_s"):
        return []
    names = {"data": "data", "forward": "fwd", "backward": "bwd", "comm": "comm", "optimizer": "opt", "other": "other"}
    phases = " | ".join(f"{short} {1e3 * prof[f'{n}_s']:.1f}" for n, short in names.items()
                        if prof.get(f"{n}_s") is not None)
    rows = [(f"{label}: step time",
             f"{phases} ms of {1e3 * prof['step_s']:.1f} ms; input stall {prof['input_stall']:.0%}")]
    if prof.get("peak_flops") and prof.get("flops_per_token"):
        achieved = prof["tokens_per_step"] / prof["step_s"] * prof["flops_per_token"]
        rows.append((f"{label}: MFU", f"{achieved / prof['peak_flops']:.1%} ({achieved / 1e9:.1f} of "
                                      f"{prof['peak_flops'] / 1e9:.1f} GFLOP/s peak)"))
    elif prof.get("peak_note"):
        rows.append((f"{label}: MFU", f"not computed: {prof['peak_note']}"))
    if prof.get("cpu_util") is not None:
        rows.append((f"{label}: CPU utilisation", f"{prof['cpu_util']:.0%} of a core"))
    return rows


# ---------------------------------------------------------------- worker-side helpers


def tiny_model(seed: int, dropout: float = 0.0):
    """The `tiny` GPT built from `seed`, dropout overridden (0: runs at any layout compare exactly)."""
    import dataclasses

    import torch

    from labs.common.model import build_model, get_config

    torch.manual_seed(seed)
    return build_model(dataclasses.replace(get_config("tiny"), dropout=dropout))
def probe(lab: str, target: str, vocab: int = 256) -> dict:
    """Does the learner's package import, is the device there, is the data written?"""
    import os

    import torch

    from checker import seams
    from labs.common.data import ensure_corpus
    from labs.common.dist import pick_device

    seams.load(lab, target)
    device, _ = pick_device(os.environ.get("COURSE_DEVICE", "auto"))
    ensure_corpus(vocab)
    return {"device": device.type, "torch": torch.__version__}  # checker/versions.py compares it with the pin


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
    it never asks the learner's wrapper how many collectives it launched. Besides each launch it keeps
    when each collective completed and when the host sat waiting for it (labs.instruments.collectives), from
    which `overlap` gets the communication time hidden behind backward.
    """

    def __init__(self):
        from labs.instruments.collectives import CollectiveTimeline

        self._timeline = CollectiveTimeline()
        self.spans: list = []

    @property
    def calls(self) -> list[tuple[float, int]] | None:
        """(launch time, numel) of each all-reduce so far while recording; None when not recording."""
        spans = self._timeline.spans
        return None if spans is None else [(s.launch, s.numel) for s in spans]

    def start(self, device=None) -> None:
        """Record from now; with the run's device, a GPU's collectives are timed on the device's clock."""
        self._timeline.start(device)

    def now(self):
        """A mark on the recorder's clock (compute windows for overlap(): convert with seconds() after stop())."""
        return self._timeline.now()

    def seconds(self, mark) -> float:
        return self._timeline.seconds(mark)

    def stop(self) -> list[tuple[float, int]]:
        """(launch time, numel) of each all-reduce since start(); the full spans stay in self.spans."""
        self.spans = self._timeline.stop()
        return [(s.launch, s.numel) for s in self.spans]

    def overlap(self, compute) -> tuple[float, float]:
        """(seconds of the last window's communication hidden behind `compute`, seconds in all)."""
        from labs.instruments.collectives import overlap

        return overlap(self.spans, compute)
