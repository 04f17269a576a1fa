"""Lab 8's async-checkpoint runs (2 ranks, ranks started by checker/spawn.py on loopback), worker side.

The model here is the checker's 4 x (1024 x 1024) MLP, not the tiny GPT: 4.2 M parameters, 16.8 MB of
weights + 33.6 MB of AdamW moments = 50 MB per save, so a write takes long enough to measure and to kill in
the middle of. The checker holds DCP's file writes back itself (FileSystemWriter.write_data) where a write must
be caught in progress; it never asks the learner's checkpointer what it did.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from checker import seams
from checker.labs._common import digest
from checker.labs.lab8 import LAB

REPS, WIDTH, DEPTH, SEED = 3, 1024, 4, 8
HELD_S = 30.0  # the longest the checker holds a save's file writes back while training takes its steps
# While the stalls are timed every file write takes this much longer, for both kinds of save: the checkpoint
# storage of a real cluster (a network file system) is slow, and the page cache here is not. A blocking save
# then stalls training >= WRITE_S + its CPU work (planning, serialising, writing 50 MB), an async one only
# for its copy and its launch (15-90 ms here). The check reads the difference, the stall the async save took
# off training's path: the held write is a sleep, which a loaded CPU does not stretch, so a correct save
# takes >= WRITE_S off whatever the load, and a save that writes before it returns takes ~0 off (it does
# the same work plus a copy). A ratio of the two would not hold still: on a loaded CPU the copy stretches and
# the sleep does not (measured: 0.04 alone, up to 0.57 beside the 4-rank run).
WRITE_S = 0.5
GATE_S = 10.0  # the longest a thread started during the checked save waits before it may run (training's 2 steps)
PLAN_S = 20.0  # the longest the background write may take to plan (its collectives) and reach its file writes
PROBE = 12_345  # floats in the all-reduce training issues during the write: a size no DCP collective has


def _setup(seed):
    import torch

    from labs.common import dist as cdist

    env = cdist.init(timeout_s=30)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return env, model, opt


def _state(model, opt):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd}


def _step(model, opt, n):
    import torch

    g = torch.Generator().manual_seed(n)
    opt.zero_grad(set_to_none=True)
    model(torch.randn(64, WIDTH, generator=g)).square().mean().backward()
    opt.step()


@contextmanager
def _gated_threads(gate: threading.Event):
    """Every thread started inside runs no Python until `gate` is set (at most GATE_S): a save whose snapshot is
    taken in its background thread then copies the weights after the training steps that follow it, every time,
    not only when the thread happens to lose the race. (threading.settrace reaches threads as they start; the
    hook stays set until the gate opens, for a thread that reads it late.)"""
    def hook(frame, event, arg):
        sys.settrace(None)
        gate.wait(timeout=GATE_S)

    threading.settrace(hook)
    try:
        yield
    finally:
        threading.settrace(None)


@contextmanager
def _slowed_writes(until, cue=None, hold_s=HELD_S):
    """Every DCP file write first waits for the event `until` (at most hold_s; a blocking save that waits for
    its own write gets there late, not never), touching the cue file first (a kill mid-write)."""
    from torch.distributed.checkpoint import FileSystemWriter

    orig = FileSystemWriter.write_data

    def slow(self, *a, **k):
        if cue:
            cue()
        until.wait(timeout=hold_s)
        return orig(self, *a, **k)

    FileSystemWriter.write_data = slow
    try:
        yield
    finally:
        FileSystemWriter.write_data = orig


def _weights(model) -> str:
    return digest(model.named_parameters())


def _timed_saves(seam, ckpt, model, opt, root, n) -> tuple[int, dict]:
    """REPS blocking and async saves, interleaved, each after a training step: (the last step, the seconds
    each kind held training)."""
    import torch.distributed as dist

    stalls = {"blocking": [], "async": []}
    for _ in range(REPS):
        for kind in ("blocking", "async"):
            n += 1
            _step(model, opt, n)
            state = _state(model, opt)  # views of the live tensors, no copy: the same for both kinds
            dist.barrier()
            t0 = time.perf_counter()
            if kind == "blocking":
                seam.blocking_save(root / "blocking", state, n)
            else:
                ckpt.save(root / "async", state, n)
            stalls[kind].append(time.perf_counter() - t0)
            if kind == "async":
                ckpt.wait()  # outside the timer: saves are rarer than writes are long
    return n, stalls


def task_async(ctx, target, root):
    """Stall of blocking vs async saves (interleaved); a save slowed while training goes on; then a save the
    checker's kill interrupts mid-write."""
    import torch.distributed as dist

    env, model, opt = _setup(SEED)
    seam = seams.load(LAB, target)
    out = ctx.partial
    root = Path(root)
    n = 0
    for _ in range(2):  # AdamW's moments exist from the first step: every save has the same bytes
        n += 1
        _step(model, opt, n)
    ckpt = seam.AsyncCheckpointer()
    with _slowed_writes(threading.Event(), hold_s=WRITE_S):  # never set: each write waits WRITE_S
        n, stalls = _timed_saves(seam, ckpt, model, opt, root, n)
    out["stalls"] = stalls
    out["write_s"] = WRITE_S
    # A save whose write is slowed while training goes on: it must hold the weights of the step it was taken at.
    # Its checkpointer is new, so that its thread starts (gated) inside the save. While the write is on its way,
    # training all-reduces on the default group, rank 1 before its writer may start, rank 0 once its writer has
    # planned: writer collectives on training's group would pair with the wrong ones (gloo pairs by order).
    n += 1
    _step(model, opt, n)
    out["saved_step"], out["saved_digest"] = n, _weights(model)
    stepped, gate, planned = threading.Event(), threading.Event(), threading.Event()
    with _slowed_writes(stepped, cue=planned.set), _gated_threads(gate):
        kept = seam.AsyncCheckpointer()
        kept.save(root / "kept", _state(model, opt), n)
        for _ in range(2):
            n += 1
            _step(model, opt, n)
        _collective_beside_write(env.rank, gate, planned)
        stepped.set()
        kept.wait()
    out["moved_on_digest"] = _weights(model)
    out["reloaded_digest"] = _load_digest(seam, root / "kept")
    ctx.write(out)
    dist.barrier()
    # The next save to the same root: the checker kills every rank while its files are being written.
    with _slowed_writes(threading.Event(), cue=lambda: ctx.cue("async_killme")):
        n += 1
        _step(model, opt, n)
        ckpt.save(root / "kept", _state(model, opt), n)
        time.sleep(120)
    return out


def _collective_beside_write(rank: int, gate: threading.Event, planned: threading.Event) -> None:
    """Training's all-reduce during the background write (see task_async): rank 1 issues it before its writer may
    plan, rank 0 after its writer planned. On a group of its own the write's collectives never meet it."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    probe = torch.ones(PROBE)
    work = dist.all_reduce(probe, async_op=True) if rank == 1 else None
    gate.set()
    if rank == 0:
        if not planned.wait(timeout=PLAN_S):
            raise RuntimeError(f"the background write had not reached its file writes {PLAN_S:.0f} s after save() "
                               "returned, while rank 1 ran an all-reduce of training on the default group: do the "
                               "write's collectives run on training's process group? (they pair with training's "
                               "in the order issued; the writer needs a group of its own)")
        work = dist.all_reduce(probe, async_op=True)
    try:
        work.wait(timedelta(seconds=PLAN_S))
        ok = bool((probe == 2).all())
    except RuntimeError as exc:
        ok, why = False, str(exc).splitlines()[0][:160]
    else:
        why = f"it summed to {probe[0].item()}, not 2"
    if not ok:
        raise RuntimeError(f"an all-reduce of training on the default group, issued while the background write "
                           f"planned, failed ({why}): the write's collectives run on training's process group and "
                           "pair with training's in the order issued; the writer needs a group of its own")


def _load_digest(seam, root: Path) -> dict:
    """Load root's latest checkpoint into a fresh model and optimizer with the checker's own code."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    folder = seam.latest(root)
    _, model, opt = _setup(SEED + 1)  # other weights: loading must overwrite every one
    _step(model, opt, 0)
    state = _state(model, opt)
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return {"folder": Path(folder).name, "digest": _weights(model)}


def task_async_load(ctx, target, root):
    """A fresh job after the kill: what the latest checkpoint under root loads."""
    from labs.common import dist as cdist

    seam = seams.load(LAB, target)
    _setup(SEED)
    root = Path(root)
    out = {"partial_left": sorted(p.name for p in root.glob("*.partial"))}
    out["loaded"] = _load_digest(seam, root)
    cdist.teardown()
    return out

