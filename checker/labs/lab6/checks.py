"""Lab 6's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): from the
runs' measurements to pass/fail. Thresholds are stated once, here, each with its reason.

On CUDA tensors gloo carries only all-reduce and broadcast: two ranks sharing one GPU over gloo send and receive
through host memory (labs/common/staging.py, a teaching fallback), so the pipeline checks run there too. pp_bubble
stays meaningful: staging adds two copies of a boundary's 2 x 32 floats (256 bytes) per transfer, small beside a
60 ms micro-batch."""
from __future__ import annotations

from checker.labs._common import Check, declare, error_result, first_error
from checker.labs.lab6 import N_MICRO, TOL, WHERE
from checker.report import CheckResult
from labs.instruments.schedule_timeline import bubble_fraction, busy, ideal_bubble, peak_live

# The schedule's bubble: each stage's micro-batches replayed in the order they ran, each taking as long as it took,
# each starting as soon as its stage is free and its input (forward: the previous stage's forward; backward: the next
# stage's backward) exists. That is the quantity (p-1)/(m+p-1) describes: the gaps between operations (send/recv,
# Python, CPU wake-ups under load) are not in it. Wall-clock bubbles of the reference sit +0.01 to +0.06 above the
# formula on 2 loaded cores, the replay within +-0.01. A schedule that does not pipeline (each micro-batch's backward
# before the next forward) replays at 1/2 for p = 2: +0.3 at m=4, +0.39 at m=8.
BUBBLE_TOL = 0.06
# Wall-clock bubble minus the replay's, best of 3 steps: time lost waiting outside the schedule's own dependencies.
# Gaps cost the reference 0.01 to 0.06 under load. A GPipe that waits for the other stage after every forward (a
# barrier, a blocking exchange) runs the forwards one stage after the other: 2m t_f instead of (m+1) t_f, a step of
# 2m t_f + (m+1) t_b against (m+1)(t_f+t_b): +0.13 at m=4, +0.18 at m=8; after every backward too: +0.3.
WAIT_TOL = 0.15
TP_NAMES = {"hand": "by hand", "dtensor": "DTensor"}
PP_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "torch_gpipe": "torch GPipe", "torch_1f1b": "torch 1F1B"}

CHECKS: list[Check] = []
check = declare(CHECKS)


def _root_cause(errors: list[dict]) -> dict:
    """The earliest error, but a peer's "Connection closed" last: it is the consequence of the other rank
    giving up (a timeout), and can be stamped a few microseconds before the cause."""
    return min(errors, key=lambda e: ("closed by peer" in e.get("message", ""), e.get("t", float("inf"))))


def ranks(runs, run: str, name: str):
    """(every rank's result of one part of a run, None) or (None, the root-cause error). A part that finished on
    every rank counts even if a later part failed; one that did not run because an earlier one failed reports
    that earlier failure."""
    r = runs.get(run)
    results = r.results if r else []
    if r and len(results) == r.nproc and all(x.get(name) is not None and not x.get(f"{name}_error") for x in results):
        return [x[name] for x in results], None
    errors = [x[f"{name}_error"] for x in results if x.get(f"{name}_error")]
    err = _root_cause(errors) if errors else first_error(runs, run)
    if err is None:  # this part never ran: an earlier part of the same run failed
        earlier = [v for x in results for k, v in x.items() if k.endswith("_error") and v]
        err = _root_cause(earlier) if earlier else {"type": "Crash", "message": f"{name} did not report on every rank"}
    return None, err


def _fail(c: Check, err: dict, label: str, unit: str = "") -> CheckResult:
    msg = err.get("message", "")
    if "Timed out" in msg or "timed out" in msg:  # gloo's words for a peer that never came
        msg += (" — the two ranks were each waiting for the other (e.g. blocking sends facing each other: a "
                "blocking dist.send waits for its receiver). Send with dist.isend, wait for the sends at the end of "
                "the step, and have each rank receive in the order its peer sends.")
    return error_result(c, {**err, "message": f"{label}: {msg}"}, unit=unit)


@check("tp_equivalence", "parallelize (by hand) and parallelize_dtensor (DTensor) on 2 ranks: logits, loss "
       f"and every gradient equal the unsharded GPT's (atol {TOL:g}); each shard holds the right slice; no tensor "
       "autograd tracks is all-reduced in place (reduce_from_tp leaves its input unchanged)",
       f"Logits right, gradients wrong: a conjugate op's backward ({WHERE}/tp_layers.py): a replicated input's "
       "gradient is a sum over the ranks, a replicated output's is already whole. Logits wrong: the shards (whole "
       f"heads of q, k, v; matching row and column slices; the bias counted once: {WHERE}/tensor_parallel.py). "
       "(checker hint lab6 tp_layers.CopyToTP.backward)",
       runs={"tp"}, crosscheck=True)
def tp_equivalence(c: Check, runs) -> CheckResult:
    worst, notes = 0.0, []
    for name, label in TP_NAMES.items():
        rs, err = ranks(runs, "tp", name)
        if err:
            return _fail(c, err, label, "max abs diff")
        problems = [p for r in rs for p in r["problems"]]
        if problems:
            return CheckResult(c.name, False, unit="max abs diff", hint=c.hint, message=f"{label}: {problems[0]}")
        in_place = max(r.get("reduced_tracked", 0) for r in rs)
        if in_place:
            return CheckResult(c.name, False, unit="max abs diff", hint=c.hint, message=(
                f"{label}: the forward all-reduced {in_place} tensor(s) autograd tracks, in place (requires_grad: "
                "the partial output handed to reduce_from_tp?). An all-reduce overwrites its buffer, and "
                "reduce_from_tp's contract leaves its input unchanged: an op that saved that tensor for backward "
                "would compute its gradient from the sum"))
        d = {k: max(r[k] for r in rs) for k in ("logits_diff", "loss_diff", "grad_diff", "weight_diff")}
        worst = max(worst, *d.values())
        notes.append(f"{label}: logits {d['logits_diff']:.1e}, grads {d['grad_diff']:.1e}, shards vs their slice "
                     f"{d['weight_diff']:.1e}")
    return CheckResult(c.name, worst <= TOL, value=worst, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message="vs the unsharded GPT, both ranks: " + "; ".join(notes))


def tp_expected_bytes(d: int, n: int) -> int:
    """fp32 bytes one rank holds of a block's split layers: every weight (12 d^2) and the column-parallel biases
    (qkv 3d, fc 4d) split N ways; the row-parallel biases (attn.proj d, mlp.proj d) whole on every rank."""
    return 4 * ((12 * d * d + 7 * d) // n + 2 * d)


@check("tp_memory", "per-rank bytes of each block's split layers, counted from the storage the tensors keep "
       "(DTensor: local shards; a view keeps its base) = weights/N + column-parallel biases/N + whole row-parallel "
       "biases",
       f"Each rank holds 1/N of every split weight, the whole row-parallel bias, nothing more ({WHERE}/tp_layers.py"
       "): does a module still refer to the full Linear? Compare with the bytes expected in the message. "
       "(checker hint lab6 tp_layers.ColumnParallelLinear)",
       runs={"tp"})
def tp_memory(c: Check, runs) -> CheckResult:
    notes, worst, want = [], 0, None
    for name, label in TP_NAMES.items():
        rs, err = ranks(runs, "tp", name)
        if err:
            return _fail(c, err, label, "bytes")
        want = tp_expected_bytes(rs[0]["n_embd"], len(rs))
        held = [b for r in rs for b in r["split_bytes"]]
        worst = max(held, key=lambda b: abs(b - want))
        full = rs[0]["full_bytes"][0]
        notes.append(f"{label} {worst:,} B ({worst / full:.2f}x)")
        if any(b != want for b in held):
            counted = [b for r in rs for b in r.get("numel_bytes", r["split_bytes"])]
            view = (" Their elements add up to the expected bytes, their storage does not: a parameter that is a view "
                    "of the full weight (a slice) keeps the whole tensor allocated" if all(b == want for b in counted)
                    else "")
            return CheckResult(c.name, False, value=worst, threshold=want, unit="bytes per block per rank", hint=c.hint,
                               message=f"{label}: a rank holds {worst:,} B of a block's attention + MLP, expected "
                                       f"{want:,} B (unsharded {full:,} B).{view}")
    return CheckResult(c.name, True, value=worst, threshold=want, unit="bytes per block per rank", hint=c.hint,
                       message=f"attention + MLP per block per rank: {', '.join(notes)} of the unsharded "
                               f"{full:,} B; formula 4*((12d^2+7d)/N + 2d)")


@check("tp_comm", "hand-written TP: all-reduces per block per step = 2 in forward + 2 in backward, each of "
       "one B*T*d activation (the checker's own count)",
       f"Where does the exact math need communication ({WHERE}/tp_layers.py)? Partial sums once in forward, a "
       "replicated input's gradient once in backward; a replicated output's gradient is already whole. "
       "(checker hint lab6 tp_layers.ReduceFromTP.backward)",
       runs={"tp"})
def tp_comm(c: Check, runs) -> CheckResult:
    rs, err = ranks(runs, "tp", "hand")
    if err:
        return _fail(c, err, TP_NAMES["hand"], "all-reduces per block")
    r = rs[0]
    want = [2] * r["n_layer"]
    per_block = f"forward {r['fwd_per_block']}, backward {r['bwd_per_block']} all-reduces per block"
    sizes = f"sizes {', '.join(f'{n:,}' for n in r['numels'])} floats (B*T*d = {r['activation_numel']:,})"
    ok = all(x["fwd_per_block"] == want and x["bwd_per_block"] == want and x["fwd_calls"] == 2 * x["n_layer"]
             and x["bwd_calls"] == 2 * x["n_layer"] and x["numels"] == [x["activation_numel"]] for x in rs)
    extra = "" if r["fwd_calls"] == sum(r["fwd_per_block"]) and r["bwd_calls"] == sum(r["bwd_per_block"]) else \
        f" ({r['fwd_calls']} forward, {r['bwd_calls']} backward in all, some outside the blocks)"
    per = (r["fwd_calls"] + r["bwd_calls"]) / r["n_layer"]
    return CheckResult(c.name, ok, value=per, threshold=4, unit="all-reduces per block per step", hint=c.hint,
                       message=f"{per_block}; {sizes}{extra}; expected 2 + 2, each one activation")


def _order_problem(schedule: str, orders: list[str]) -> str | None:
    """torch's schedule on each stage, as the order of its forwards (F) and backwards (B): GPipe runs every forward
    before the first backward; 1F1B (m = 4 > p) starts backwards before the last forward."""
    for stage, order in enumerate(orders):
        gpipe_like = "B" not in order.rstrip("B")
        if gpipe_like != (schedule == "gpipe"):
            return (f"torch {PP_NAMES[schedule].removeprefix('torch ')}: stage {stage} ran {' '.join(order)} (F a "
                    f"micro-batch's forward, B its backward): " + (
                        "every forward before the first backward is GPipe's order, not 1F1B's" if gpipe_like else
                        "backwards before the last forward is 1F1B's order, not GPipe's") +
                    ". The numbers agree either way; the memory does not: is the schedule the one its name asks for?")
    return None


@check("pp_equivalence", f"2 stages, {N_MICRO} micro-batches: your GPipe and 1F1B (send/recv) and "
       "torch.distributed.pipelining's: per-micro-batch losses and every gradient equal the unsplit GPT's "
       f"(atol {TOL:g}); split_stages of a 4-layer GPT, chained, gives its logits; torch's schedules run in "
       "their own order (hooks); no blocking dist.send in your 1F1B",
       f"The gradients must be those of the whole batch's mean loss ({WHERE}/schedules.py): what does each of the m "
       "micro-batches contribute, and what does a stage's backward receive and pass on? Each parameter lives on one "
       f"stage; the tied embedding/head weight is used on two ({WHERE}/stages.py). "
       "(checker hint lab6 schedules.forward)",
       runs={"pp"}, crosscheck=True)
def pp_equivalence(c: Check, runs) -> CheckResult:
    worst, notes, share = 0.0, [], ""
    chained, err = ranks(runs, "pp", "chained")
    if err:
        return _fail(c, err, "split_stages on a 4-layer GPT", "max abs diff")
    if max(chained) > TOL:
        return CheckResult(c.name, False, value=max(chained), threshold=TOL, unit="max abs diff", hint=c.hint,
                           message=f"split_stages on a GPT of 4 layers (eval mode): the stages chained, each one's "
                                   f"output into the next, give logits {max(chained):.1e} away from the whole "
                                   "model's. With tiny's 2 layers any split into 2 stages is in order; with 4, does "
                                   "each stage hold a contiguous run of blocks, in the model's order?")
    for name, label in PP_NAMES.items():
        rs, err = ranks(runs, "pp", name)
        if err:
            return _fail(c, err, label, "max abs diff")
        problems = [p for r in rs for p in r["problems"]]
        if problems:
            return CheckResult(c.name, False, unit="max abs diff", hint=c.hint, message=f"{label}: {problems[0]}")
        blocking = max(r.get(f"{name}_blocking_sends", 0) for r in runs["pp"].results)
        if name == "1f1b" and blocking:
            return CheckResult(c.name, False, value=blocking, threshold=0, unit="blocking sends", hint=c.hint, message=(
                f"{label}: pipeline_step called the blocking dist.send {blocking} times on a stage. gloo buffers a "
                "small send and returns; NCCL's waits for the peer's receive, which in 1F1B's steady state the peer "
                "posts only after its own send: a deadlock on GPUs. Sends and receives facing each other go out "
                "together (schedules.py's docstring)"))
        order = _order_problem(name.removeprefix("torch_"), [r.get(f"{name}_order", "") for r in runs["pp"].results]) \
            if name.startswith("torch_") else None
        if order:
            return CheckResult(c.name, False, unit="max abs diff", hint=c.hint, message=order)
        d = max(max(r["loss_diff"], r["grad_diff"]) for r in rs)
        worst = max(worst, d)
        notes.append(f"{label} {d:.1e}")
        share = ", ".join(f"{r['stage_bytes'] / r['model_bytes']:.0%}" for r in rs)
    return CheckResult(c.name, worst <= TOL, value=worst, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"losses and gradients vs the unsplit GPT, {N_MICRO} micro-batches: {', '.join(notes)}; "
                               f"the stages hold {share} of the parameter bytes")


def _timelines(runs, schedule: str):
    """({m: [one step's events per rank, ...per repeat]}, None) or (None, error)."""
    rs, err = ranks(runs, "pp_timing", schedule)
    if err:
        return None, err
    return {int(m): [[r[m][rep] for r in rs] for rep in range(len(rs[0][m]))] for m in rs[0]}, None


def _incomplete(steps, m: int) -> str | None:
    for stage, events in enumerate(steps[0]):
        f, b = (sum(e["kind"] == k for e in events) for k in "FB")
        if (f, b) != (m, m):
            return f"m={m}: stage {stage} ran {f} forwards and {b} backwards; expected {m} of each"
    return None


def replayed_bubble(ranks: list[list[dict]]) -> float:
    """The bubble of the order each stage ran its micro-batches in, without the time lost between them: each
    event keeps its duration and starts when its stage is free and its input exists (see BUBBLE_TOL)."""
    p = len(ranks)
    queues = [sorted(r, key=lambda e: e["start"]) for r in ranks]
    done, free, pos = {}, [0.0] * p, [0] * p
    while any(pos[s] < len(queues[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if pos[s] == len(queues[s]):
                continue
            e = queues[s][pos[s]]
            dep = ((s - 1, "F") if e["kind"] == "F" else (s + 1, "B"))
            if 0 <= dep[0] < p:
                ready = done.get((dep[0], dep[1], e["mb"]))
                if ready is None:
                    continue
            else:
                ready = 0.0
            start = max(free[s], ready)
            free[s] = done[(s, e["kind"], e["mb"])] = start + e["end"] - e["start"]
            pos[s] += 1
            progressed = True
        if not progressed:  # an order that could not have run: report it as all bubble
            return 1.0
    span = max(free)
    return sum(1 - busy(r) / span for r in ranks) / p


@check("pp_bubble", "your GPipe and 1F1B on the checker's fixed-cost stages, m = 4 and 8: measured idle "
       "fraction within a tolerance of (p-1)/(m+p-1)",
       f"The bubble comes from the order ({WHERE}/schedules.py): does a stage start micro-batch i+1 while the next "
       "stage works on i, and does it wait for the other stage anywhere but in a receive? "
       "(checker hint lab6 schedules.gpipe)",
       runs={"pp_timing"})
def pp_bubble(c: Check, runs) -> CheckResult:
    notes, worst, wait = [], 0.0, 0.0
    for schedule, label in (("gpipe", "GPipe"), ("1f1b", "1F1B")):
        tl, err = _timelines(runs, schedule)
        if err:
            return _fail(c, err, label, "bubble - formula")
        parts = []
        for m, steps in tl.items():
            bad = _incomplete(steps, m)
            if bad:
                return CheckResult(c.name, False, unit="bubble - formula", hint=c.hint, message=f"{label}: {bad}")
            # best of the repeats, each quantity on its own: a wrong schedule is wrong in every repeat, while a
            # repeat that other processes disturbed (a late wake-up stretching one sleep) is off in one
            formula, replays = ideal_bubble(len(steps[0]), m), [replayed_bubble(s) for s in steps]
            measured = min(replays, key=lambda b: abs(b - formula))
            if abs(measured - formula) > abs(worst):
                worst = measured - formula
            wait = max(wait, min(bubble_fraction(s) - r for s, r in zip(steps, replays)))
            parts.append(f"m={m} {measured:.3f} ({formula:.3f}; wall clock {min(map(bubble_fraction, steps)):.3f})")
        notes.append(f"{label} " + ", ".join(parts))
    message = (f"the schedule's bubble (formula (p-1)/(m+p-1)): {'; '.join(notes)}; wall clock minus the schedule's "
               f"bubble at most {wait:.3f} (limit {WAIT_TOL})")
    if abs(worst) <= BUBBLE_TOL and wait > WAIT_TOL:  # the row shows the criterion that failed
        return CheckResult(c.name, False, value=round(wait, 3), threshold=WAIT_TOL,
                           unit="wall clock - schedule's bubble", hint=c.hint,
                           message=message + ": the stages lost that much of the step waiting outside the schedule's "
                                             "dependencies (a barrier or a blocking exchange per micro-batch?)")
    return CheckResult(c.name, abs(worst) <= BUBBLE_TOL, value=round(worst, 3), threshold=BUBBLE_TOL,
                       unit="bubble - formula", hint=c.hint, message=message)


@check("pp_1f1b_memory", "m = 8: 1F1B holds at most p - stage micro-batches' activations at once, fewer than "
       "GPipe's m (counted from forward start to backward end, and as tensors still referenced at each forward)",
       f"1F1B's point is memory ({WHERE}/schedules.py): how many micro-batches must stage r have in flight before "
       "the first gradient can come back from the last stage, and what keeps that count from growing afterwards? "
       "(checker hint lab6 schedules.one_f_one_b)",
       runs={"pp_timing"})
def pp_1f1b_memory(c: Check, runs) -> CheckResult:
    peaks = {}
    for schedule, label in (("gpipe", "GPipe"), ("1f1b", "1F1B")):
        tl, err = _timelines(runs, schedule)
        if err:
            return _fail(c, err, label, "micro-batches live")
        m = max(tl)
        bad = _incomplete(tl[m], m)
        if bad:
            return CheckResult(c.name, False, unit="micro-batches live", hint=c.hint, message=f"{label}: {bad}")
        peaks[schedule] = [max(peak_live(step[stage]) for step in tl[m]) for stage in range(len(tl[m][0]))]
    p = len(peaks["1f1b"])
    bound = [p - s for s in range(p)]
    held, err = ranks(runs, "pp_timing", "1f1b_held")
    if err:
        return _fail(c, err, "1F1B", "micro-batches live")
    over = [(s, h[str(m)]) for s, h in enumerate(held) if h.get(str(m), 0) > bound[s]]
    if over and all(a <= b for a, b in zip(peaks["1f1b"], bound)):
        s, n = over[0]
        return CheckResult(c.name, False, value=n, threshold=bound[s], unit="micro-batches referenced (1F1B)",
                           hint=c.hint, message=(
                               f"m={m}: 1F1B's timeline is right (most micro-batches between forward and backward per "
                               f"stage: {peaks['1f1b']}), but at one of its forwards stage {s} still referenced the "
                               f"input or output of {n} micro-batches (bound {bound[s]}): tensors of micro-batches "
                               "whose backward had run were kept, so memory still grows with m. A backward frees what "
                               "its forward kept"))
    ok = all(a <= b for a, b in zip(peaks["1f1b"], bound)) and peaks["1f1b"][0] < peaks["gpipe"][0]
    msg = (f"m={m}, most micro-batches held at once per stage: GPipe {peaks['gpipe']}, 1F1B {peaks['1f1b']} "
           f"(1F1B bound p - stage: {bound})")
    return CheckResult(c.name, ok, value=peaks["1f1b"][0], threshold=bound[0], unit="micro-batches live (stage 0)",
                       hint=c.hint, message=msg)
