"""Lab 8's goodput runs, worker side: the learner's checkpoint interval and goodput formula at hidden values, and a
training job killed at random while it runs (a chaos schedule), restarted each time from the learner's checkpoint.

The job is one rank: the checker's small MLP, AdamW, each step padded to STEP_S (a GPU-bound step, which a loaded
CPU does not stretch), saved with the learner's save_checkpoint every k steps (k from the learner's
checkpoint_interval for the measured save cost) to a store whose every file write takes WRITE_S longer (checkpoint
storage is slow; this page cache is not). A supervisor (this task's process) forks each attempt from itself, as a
scheduler restarts a job on a replacement node (a fork: the restart costs RESTART_S of boot plus the learner's
resume, not torch's import), SIGKILLs it at the next failure time, and forks the next. The failure gaps are an
exponential's with mean MTBF_S: each block of BLOCK gaps holds its BLOCK quantile midpoints, scaled to mean MTBF_S,
in an order the grade's variant draws. Stratified, so the failures come at MTBF_S's rate over every BLOCK of them,
not at one draw's luck; the ~6 of a run still end inside a block, so the learner's prediction is read at the rate
that came (wall time / failures). One attempt (TORN_AT) is killed inside its first save instead, its shard files
written and DCP's `.metadata` not (_held_save.HeldDCPWrite): the next attempt must resume from the checkpoint
before it.

Measured on 2 cores shared with other graders (load ~8): measured - predicted goodput -0.004, +0.05, -0.01
(variants 0-2; a failure costs a fifth of an MTBF, where the first-order model holds to a few hundredths), the
chaos 26-29 s, the whole check 40-46 s (58-78 s at load 12-17). A prediction that ignores failures is ~0.3 off;
one that leaves out only the restart 0.05-0.13 (its share, R / MTBF, grows with the load), which goodput_formulas
catches exactly. bench/lab8_figures.py runs the job at other intervals and MTBFs.

The checker's own model (young_daly, goodput) is read by both sides: here to pick the hidden cases, in checks.py
(which holds the bands a learner's numbers must fall within) to judge them.
"""
from __future__ import annotations

import json
import math
import os
import random
import signal
import time
import warnings
from pathlib import Path

from checker import seams
from checker.labs._held_save import HeldDCPWrite
from checker.labs.lab8 import LAB

SEED, WIDTH, DEPTH, BATCH, LR = 33, 64, 3, 16, 1e-2
STEP_S = 0.01    # a step's time, padded with a sleep: the MLP's compute is ~0.5 ms (a few ms on a loaded CPU)
WRITE_S = 0.05   # every checkpoint file write waits this long: a save stalls ~0.1 s, a 2-core laptop's NFS
RESTART_S = 0.1  # a replacement node's boot before the job starts again (a cluster's minutes, scaled as MTBF_S is)
MTBF_S = 4.0     # the failures' mean gap: a failure costs R + P/2 ~ 0.85 s, a fifth of it (first order holds)
STEPS = 1600     # ~20 s of steps; ~28 s of wall time at the optimum, ~7 failures
BLOCK = 8        # gaps stratified per block of 8
TORN_AT = 1      # the first restart is killed inside its first save: at most ~950 steps in (the longest first
                 # gap, 11.6 s), so it always has one to reach
WALL_S = 90.0    # the job must finish within this (goodput ~0.25; measured 0.52-0.64, loaded or not): a resume
                 # that starts over never does
CALIBRATE = 3    # saves timed before the chaos: their median is the C the learner's interval is asked for


def young_daly(save_s: float, mtbf_s: float) -> float:
    """The checker's own optimum: sqrt(2 C MTBF), seconds of training between saves."""
    return math.sqrt(2 * save_s * mtbf_s)


def goodput(step_s: float, save_s: float, restart_s: float, mtbf_s: float, interval_steps: int) -> float:
    """The checker's own expected goodput, first order in 1 / MTBF: tau / (tau + C) of a period trains; each failure
    (one per MTBF of wall time) costs R and on average half a period."""
    tau = interval_steps * step_s
    period = tau + save_s
    return tau / period * max(0.0, 1.0 - (restart_s + period / 2) / mtbf_s)


def unit_cases(variant: int) -> list[tuple]:
    """(step_s, save_s, restart_s, mtbf_s, interval_steps) at which the learner's formulas are read: a cluster's
    numbers (steps of 0.3-2 s, saves of 5-60 s, a failure every 1-7 days, a restart of 0.5-1.5 x half the optimal
    interval: 10-60 min), the interval at half, once and twice the optimum. Each cost is >= 12% of the waste
    1 - goodput, and the second-order terms (the other first-order forms, Daly's exact one) <= 3.1% of it
    (test_lab8_grade): a formula that leaves a cost out misses by more than the tolerance, any first-order one
    meets it."""
    rng = random.Random(1000 + variant)
    cases = []
    for factor in (0.5, 1.0, 2.0):
        step_s, save_s = rng.uniform(0.3, 2.0), rng.uniform(5.0, 60.0)
        mtbf_s = rng.uniform(1.0, 7.0) * 86_400
        restart_s = rng.uniform(0.5, 1.5) * math.sqrt(save_s * mtbf_s / 2)
        cases.append((step_s, save_s, restart_s, mtbf_s,
                      max(1, round(factor * young_daly(save_s, mtbf_s) / step_s))))
    return cases


def schedule(variant: int, n: int, mtbf_s: float = MTBF_S) -> list[float]:
    """n failure gaps: per block of BLOCK, the exponential's quantile midpoints -MTBF ln(1 - (i + 1/2) / BLOCK),
    scaled to mean mtbf_s, shuffled by the variant's seed."""
    mids = [-math.log(1 - (i + 0.5) / BLOCK) for i in range(BLOCK)]
    mids = [mtbf_s * m * BLOCK / sum(mids) for m in mids]
    rng, out = random.Random(7919 * (variant + 1)), []
    while len(out) < n:
        block = list(mids)
        rng.shuffle(block)
        out += block
    return out[:n]


# ---------------------------------------------------------------- worker side
def task_goodput_units(ctx, target, variant):
    """The learner's two functions at the variant's cases (the checker compares; nothing is graded here)."""
    seam = seams.load(LAB, target)
    out = ctx.partial
    out["cases"] = unit_cases(variant)
    out["interval"] = [float(seam.checkpoint_interval(c[1], c[3])) for c in out["cases"]]
    out["goodput"] = [float(seam.predict_goodput(*c)) for c in out["cases"]]
    return out


class _Log:
    """One JSON line per event, appended with one write each (O_APPEND): a SIGKILL leaves whole lines."""

    def __init__(self, path: Path, attempt: int):
        self.fd, self.attempt = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), attempt
        self.held = path.with_name(f"held_{attempt}")

    def __call__(self, ev: str, **kw) -> None:
        os.write(self.fd, (json.dumps({"a": self.attempt, "ev": ev, **kw}) + "\n").encode())

    # HeldDCPWrite's context: it reports the hold as a cue
    def write(self, out: dict) -> None:
        pass

    def cue(self, name: str) -> None:
        self("held", t=time.monotonic())
        self.held.touch()  # the supervisor looks for this file, not through the log


def _read(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _model():
    import torch

    torch.manual_seed(SEED)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.AdamW(model.parameters(), lr=LR)


def _step(model, opt, step: int) -> float:
    """One AdamW step on step's own batch (a function of the step alone: every attempt sees the same data)."""
    import torch

    g = torch.Generator().manual_seed(SEED * 100_003 + step)
    x = torch.randn(BATCH, WIDTH, generator=g)
    opt.zero_grad(set_to_none=True)
    loss = (model(x) - x.flip(1)).square().mean()
    loss.backward()
    opt.step()
    return float(loss.detach())


def _slow_storage() -> None:
    """Every DCP file write waits WRITE_S first (installed in the supervisor: each attempt inherits it). Also builds
    the model and optimizer once, so that every fork inherits what their first use imports (1.3-1.8 s in a fresh
    process, paid by each restart otherwise; the checker's fork server has most of it loaded already)."""
    _model()
    from torch.distributed.checkpoint import FileSystemWriter

    orig = FileSystemWriter.write_data

    def slow(self, *a, **k):
        time.sleep(WRITE_S)
        return orig(self, *a, **k)

    FileSystemWriter.write_data = slow


def _child(body) -> int:
    """Fork; the child runs body() and leaves with os._exit (never returning into the worker)."""
    with warnings.catch_warnings():  # the worker's watchdog thread: the child never needs it
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: a supervisor killed takes it along
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        body()
    except BaseException:  # noqa: BLE001 - the supervisor reads the error from the log
        code = 3
    finally:
        os._exit(code)


def _init():
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def _reference(log: Path) -> None:
    """The uninterrupted run: every step's loss, no checkpoint."""
    import torch

    torch.set_num_threads(1)  # as every attempt runs (_init)
    model, opt = _model()
    losses = [_step(model, opt, s).hex() for s in range(1, STEPS + 1)]
    log.write_text(json.dumps(losses))


def _calibrate(seam, root: Path, log: Path) -> None:
    _init()
    model, opt = _model()
    times = []
    try:
        for s in range(1, CALIBRATE + 1):
            _step(model, opt, s)
            t0 = time.monotonic()
            seam.save_checkpoint(str(root), model, opt, s)
            times.append(time.monotonic() - t0)
    except Exception as exc:  # the supervisor names it: the fork's own exit status says only that it failed
        import traceback

        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/checker/" not in f.filename]
        where = f" ({frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        log.with_suffix(".error").write_text(f"{type(exc).__name__}: {str(exc)[:400]}{where}")
        raise
    log.write_text(json.dumps(times))


def save_cost(seam, root: Path) -> float:
    """The median seconds of CALIBRATE saves with the learner's save_checkpoint, in a forked run: the C the learner's
    interval is asked for."""
    code = _wait(_child(lambda: _calibrate(seam, root / "calibrate", root / "calibrate.json")), 60)
    if code != 0 or not (root / "calibrate.json").exists():
        err = root / "calibrate.error"
        why = err.read_text() if err.exists() else f"exit {code}"
        raise RuntimeError(f"saving {CALIBRATE} checkpoints with save_checkpoint (world size 1) failed: {why}")
    calib = json.loads((root / "calibrate.json").read_text())
    return sorted(calib)[len(calib) // 2]


def _attempt(seam, root: Path, log: _Log, every: int, hold: bool) -> None:
    """One attempt of the job: boot, resume from the learner's checkpoint, train to STEPS, saving every `every`."""
    import traceback

    try:
        time.sleep(RESTART_S)
        _init()
        model, opt = _model()
        held = HeldDCPWrite(log, {}) if hold else None
        if held:
            held.armed = True  # the first save of this attempt is held once its shards are written, then killed
        t0 = time.monotonic()
        start = seam.resume(str(root), model, opt)
        log("ready", t=time.monotonic(), resumed=int(start), load_s=time.monotonic() - t0)
        for step in range(int(start) + 1, STEPS + 1):
            t0 = time.monotonic()
            loss = _step(model, opt, step)
            time.sleep(max(0.0, t0 + STEP_S - time.monotonic()))
            log("step", step=step, loss=loss.hex(), t0=t0, t1=time.monotonic())
            if step % every == 0 and step < STEPS:
                t0 = time.monotonic()
                log("saving", step=step, t=t0)
                seam.save_checkpoint(str(root), model, opt, step)
                log("saved", step=step, t0=t0, t1=time.monotonic())
        log("done", t=time.monotonic())
    except BaseException as exc:
        log("error", type=type(exc).__name__, message=str(exc)[:600], traceback=traceback.format_exc()[-3000:])
        raise


def _wait(pid: int, budget_s: float) -> int:
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise TimeoutError(f"a forked run of the goodput job did not end within {budget_s:.0f} s")


def task_goodput_chaos(ctx, target, root, variant):
    """The reference run, the save cost's calibration, the learner's interval, then the job under the chaos
    schedule; returns every attempt's log and the supervisor's kills for the evaluator."""
    seam = seams.load(LAB, target)
    out = ctx.partial
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    _slow_storage()
    code = _wait(_child(lambda: _reference(root / "reference.json")), 60)
    if code != 0:
        raise RuntimeError(f"the uninterrupted run exited {code}")
    out["reference"] = json.loads((root / "reference.json").read_text())
    out["save_cal_s"] = save_s = save_cost(seam, root)
    out["interval_s"] = interval_s = float(seam.checkpoint_interval(save_s, MTBF_S))
    out["every"] = every = max(1, min(STEPS, round(interval_s / STEP_S)))
    ctx.write(out)
    out.update(chaos(seam, root, every, variant))
    m = out["measured"]
    if m.get("step_s"):  # the prediction for the failures that came (their count varies as a Poisson process's)
        out["predicted"] = float(seam.predict_goodput(m["step_s"], m["save_s"], m["restart_s"], m["mtbf_s"], every))
    return out


def chaos(seam, root: Path, every: int, variant: int, mtbf_s: float = MTBF_S) -> dict:
    """The job under the chaos schedule (failure gaps of mean mtbf_s), saving every `every` steps: the supervisor's
    kills, every attempt's log, and what they measure. bench/lab8_figures.py runs it at other intervals."""
    out: dict = {}
    gaps, torn_at = schedule(variant, 200, mtbf_s), TORN_AT
    log_path, ckpt = root / "chaos.jsonl", root / "chaos"
    kills, attempt, t_begin = [], 0, time.monotonic()
    pid = _child(lambda: _attempt(seam, ckpt, _Log(log_path, 0), every, False))
    next_kill = time.monotonic() + gaps[0]
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                out["exit"] = os.waitstatus_to_exitcode(status)
                pid = None
                break
            now = time.monotonic()
            if now - t_begin > WALL_S:
                out["timeout"] = True
                break
            held = attempt == torn_at and log_path.with_name(f"held_{attempt}").exists()
            if held or (attempt != torn_at and now >= next_kill):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                kills.append({"a": attempt, "t": time.monotonic(), "held": held})
                attempt += 1
                pid = _child(lambda a=attempt: _attempt(seam, ckpt, _Log(log_path, a), every, a == torn_at))
                next_kill = time.monotonic() + gaps[attempt % len(gaps)]
            time.sleep(0.003)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    out.update(kills=kills, torn_at=torn_at, events=_read(log_path), wall_limit_s=WALL_S,
               partial_left=sorted(p.name for p in ckpt.glob("*.partial")))
    out["measured"] = measure(out)
    return out


def measure(r: dict) -> dict:
    """From the attempts' logs and the kills: the kept steps, their time, the wall time, and the mean step, save and
    restart times (the restart: from a kill to the next attempt's first step, for the attempts that got there)."""
    ev = r["events"]
    kept: dict[int, dict] = {}
    for e in ev:
        if e["ev"] == "step":
            kept[e["step"]] = e  # a later attempt's run of a step replaces the earlier one
    if not kept:
        return {}
    first = min((e for e in ev if e["ev"] == "step"), key=lambda e: e["t0"])
    end = max(e["t1"] for e in kept.values())
    useful = sum(e["t1"] - e["t0"] for e in kept.values())
    saves = [e["t1"] - e["t0"] for e in ev if e["ev"] == "saved"]
    kill_t = {k["a"]: k["t"] for k in r["kills"]}
    firsts: dict[int, float] = {}
    for e in ev:
        if e["ev"] == "step" and e["a"] not in firsts:
            firsts[e["a"]] = e["t0"]
    restarts = [firsts[a] - kill_t[a - 1] for a in firsts if a - 1 in kill_t]
    wall = end - first["t0"]
    save_s = sum(saves) / len(saves) if saves else 0.0
    restart_s = sum(restarts) / len(restarts) if restarts else 0.0
    n = max(1, len(r["kills"]))
    # where each failure's time went: the restarts, the save stalls spread over the failures, and the rest of the
    # wall time that was not a kept step (the steps run again after a kill)
    lost = {"redone": (wall - useful - sum(saves) - restart_s * n) / n, "restart": restart_s,
            "save_stalls": sum(saves) / n}
    return {"kept": len(kept), "useful_s": useful, "wall_s": wall, "goodput": useful / wall if wall > 0 else 0.0,
            "step_s": useful / len(kept), "save_s": save_s, "restart_s": restart_s, "saves": len(saves),
            "failures": len(r["kills"]), "mtbf_s": wall / n, "per_failure_s": lost}

