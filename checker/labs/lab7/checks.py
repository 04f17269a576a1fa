"""Lab 7's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): from the
runs' measurements to pass/fail. Thresholds and the checker's own byte formulas are here; the fast path's check is
declared in fast.py, with the runs it starts, and comes last."""
from __future__ import annotations

import statistics

from checker.labs._common import Check, declare, error_result, first_error
from checker.labs._windows import departs_at, loss_at, paired_ratio
from checker.labs.lab7 import AMP_TOL, EQUIV_TOL, FP8_TOL, GRAD_BAND, GRAD_TOL, LOSS_BAND, WHERE, fast
from checker.labs.lab7.setup import FP8, OVERFLOW_AT, PLAN, TIMING, plan_cfg
from checker.relay import turn_rates
from checker.report import CheckResult

# recompute_cost: full/none CPU time per step = 1 + x, x = one forward of the blocks / a step. In FLOPs a step is
# forward 1 + backward 2, so x = F_blocks / (3 F_model) (0.31 for TIMING's shape). On one CPU core backward costs
# 1.5-2x a forward (not exactly 2x), so measured x runs higher. Each side runs in a process of its own, taking
# turns (checker/relay.py), its windows' CPU time read by the checker: the reference measures 1.46-1.53 there in
# windows of 4 steps (7 grades, load 6-7.8 on 2 cores; x 0.46-0.53), 1.40-1.67 in windows of 2 steps, and 1.39-1.68
# over 10 grades beside another grade (bench/MARGINS.md). Two models interleaved step by step in one process
# measure 1.30-1.45: each step finds the cache full of the other model's, a fixed cost on both sides.
# The band is [1 + x/2, 1 + 2.5x] (1.15-1.77). Nested non-reentrant checkpoints do not rerun twice (torch recomputes
# the inner one inside the outer rerun); checkpoint(debug=True), which traces every op, measures 4.6-4.9x here (3.3x in
# one process); nothing recomputed 1.01x. A block rerun twice would cost ~1 + 2 x 0.5 = 2.0 (estimated, not measured).
COST_BAND = (0.5, 2.5)

CHECKS: list[Check] = []
check = declare(CHECKS)


def expected_bytes(n_embd, n_head, batch, seq, dropout=0.1, precision="fp32", recompute="none") -> int:
    """Bytes one block of labs/common/model.py keeps for backward on the CPU (the lab README's derivation)."""
    b, s, h, a = batch, seq, n_embd, n_head
    bsh, f = b * s * h, 4 if precision == "fp32" else 2
    if recompute == "full":
        return 4 * bsh
    if recompute == "selective":
        return 4 * bsh + 9 * f * bsh
    total = 4 * bsh + 16 * b * s + 3 * f * bsh + 4 * bsh + 8 * f * bsh  # x, LN stats, Linear ins, LN2 in, GELU
    if dropout > 0:  # math attention: q, k, v (v a view of the qkv output when b or a is 1, in fp32); a*s^2 x3
        v = 3 * bsh if (b == 1 or a == 1) and precision == "fp32" else bsh
        total += 4 * (2 * bsh + v) + 12 * b * a * s * s + 2 * f * bsh  # ...; two masks
    else:
        total += 3 * f * bsh + 4 * b * a * s  # flash attention: qkv, logsumexp
    return total + (24 * h * h if precision == "bf16" else 0)  # autocast's bf16 weight copies


def _fail(c, runs, run, key=None, unit=""):
    err = first_error(runs, run)
    if err is None and key is not None:
        err = runs[run].result.get(f"{key}_error")
    return error_result(c, err, unit) if err else None


@check("activation_estimate", "activation_bytes(cfg, b, s, precision, recompute) equals the bytes one block "
       "keeps for backward, measured by the checker (fp32 and bf16; no, selective and full recomputation under "
       "the checker's own checkpointing), at five shapes (dropout on and off, b = 1, a = 1)",
       f"A term missing, counted twice (one storage is kept once) or in the wrong dtype ({WHERE}/activations.py), "
       "at the shape the message names; measure.py's saved_bytes on one block lists what is really kept "
       "(checker hint lab7 activations.activation_terms)",
       runs={"memory"}, crosscheck=True)
def activation_estimate(c: Check, runs) -> CheckResult:
    bad = _fail(c, runs, "memory", "predicted", "bytes")
    if bad:
        return bad
    r = runs["memory"].result
    rows, worst, at, groups = [], 0, "", {}
    for (pr, rc, shape), got, want in zip(r["cases"], r["measured"], r["predicted"]):
        h, a, b, s, p = shape
        mode = "" if rc == "none" else f", {rc} recomputation"
        rows.append(f"{pr}{mode} h={h} a={a} b={b} s={s} dropout={p}: predicted {want:,} B, measured {got:,} B")
        if abs(want - got) > abs(worst):
            worst, at = want - got, rows[-1]
        groups.setdefault((pr, rc), []).append((shape, want - got))
    ok = all(x == y for x, y in zip(r["measured"], r["predicted"]))
    why = ""
    for (pr, rc), diffs in groups.items():  # the error as one term of the derivation, one count at a time
        if any(d for _, d in diffs) and not why:
            why = explain_bytes([shape for shape, _ in diffs], [d for _, d in diffs], pr, rc)
            why = f"{pr}{'' if rc == 'none' else ', ' + rc + ' recomputation'}: {why}" if why else ""
    n = sum(rc == "none" for _, rc, _ in r["cases"])
    return CheckResult(c.name, ok, value=worst, threshold=0, unit="bytes off (predicted - measured)",
                       hint=why or c.hint,
                       message=("per block: " + "; ".join(rows[:n]) + f"; and {len(rows) - n} estimates under "
                                "selective and full recomputation (the checker's own), fp32 and bf16")
                       if ok else f"off by {worst:+,} B at {at}")


def _causes(name, k, bytes_per, dropout_only, recompute) -> str:
    """The slips that give exactly k x name bytes, in words ('' if none known): the symptom, named by its cause."""
    f, known = bytes_per, {}
    if recompute == "selective" and name == "b*s*h":
        known = {9 * (4 - f): "selective's Linear outputs counted in fp32: they keep the matmul's dtype "
                              f"({f} bytes here)", -9 * f: "the Linear outputs left out", -f: "one h-wide Linear "
                              "output left out (qkv 3h, attention proj h, fc 4h, MLP proj h: 9 bsh in all)"}
    elif recompute == "full" and name == "b*s*h":
        known = {k: "full recomputation keeps the block input alone (4 bsh, fp32): checkpoint holds it to rerun "
                    "the block; everything else, the block's output included, is rerun or belongs to the next block"}
    elif recompute == "none" and dropout_only and name == "b*s*h":
        known = {2 * (1 - f): f"the two dropout masks counted as 1-byte bools: on the CPU a mask is a float in the "
                              f"tensor's dtype ({f} bytes)",
                 -2 * f: "the two dropout masks (attention, MLP) left out", -f: "one dropout mask left out",
                 -12: "attention's q, k, v copies left out (the math kernel keeps all three, in fp32)"}
        if f != 4:  # under autocast the math attention still runs, and keeps q, k, v, in fp32
            known[3 * (f - 4)] = f"q, k, v counted in the autocast dtype ({f} bytes): the CPU's math attention " \
                                 "runs in fp32 under bf16 autocast too, and keeps them in fp32"
        if known.get(-2 * f) and -f == 2 * (1 - f):
            known[-f] += ", or " + known[2 * (1 - f)]
    return known.get(k, "")


def explain_bytes(shapes, diffs, precision="fp32", recompute="none") -> str:
    """The estimate's error as one term of the derivation, where one fits every shape: '+8,192 B = 4 x b*s*h at
    ...: a tensor counted that the graph does not keep', with the slip that gives it where one is known. '' when no
    single term explains it."""
    terms = (("b*s*h", lambda h, a, b, s: b * s * h), ("a*b*s^2", lambda h, a, b, s: a * b * s * s),
             ("b*s", lambda h, a, b, s: b * s), ("h^2", lambda h, a, b, s: h * h), ("h", lambda h, a, b, s: h))
    off = [(shape, d) for shape, d in zip(shapes, diffs) if d]
    some = len(off) < len(diffs)  # the error shows at some shapes only: where is the pattern?
    dropout_only = some and all(shape[4] for shape, _ in off)
    # b = 1 or a = 1, dropout on: the reshape of v to (b, a, s, d) merges dims, so v is a view keeping its base
    view_only = dropout_only and recompute == "none" and all(shape[1] == 1 or shape[2] == 1 for shape, _ in off)
    for name, size in terms:
        ks = {d / size(*shape[:4]) for shape, d in off}
        if len(ks) != 1:
            continue
        k = ks.pop()
        if abs(k) > 64 or k * 2 != int(k * 2):
            continue
        per = {1: ", one bool mask's worth", 4: ", one fp32 tensor's worth"}.get(abs(k), "")
        (h, a, b, s, p), d = off[0]
        if view_only:
            where = (" (only at shapes with dropout on and b = 1 or a = 1: there the reshape of v to (b, a, s, d) "
                     "merges dims, so v is a view of the qkv output, not a copy, and a view keeps its whole base, "
                     "3 bsh in fp32)")
        elif dropout_only:
            where = (" (only at the shapes with dropout on: there the CPU runs the math attention kernel, with its "
                     "q, k, v copies and a*s^2 tensors, and dropout keeps its masks)")
        else:
            where = ""
        cause = ("v counted as a copy (4 bsh) where it is a view keeping its base (12 bsh)" if k == -8 else ""
                 ) if view_only else _causes(name, k, {"fp32": 4, "bf16": 2}[precision], dropout_only, recompute)
        side = (f"most likely {cause}." if cause else
                "you count a tensor the graph does not keep for backward: counted twice, an alias of another, or "
                "freed after forward?" if k > 0 else
                f"a tensor backward needs is missing from your count: which op keeps a {name}-sized input or output?")
        return (f"{d:+,} B at h={h} a={a} b={b} s={s} is {k:+g} x {name} bytes{per}{where}: {side} Measure one op "
                f"at a time with saved_bytes (measure.py) to find it.")
    return ""


# checkpoint_memory's hint, by mode and by the sign of the difference: (mode, kept more than the formula)
CHECKPOINT_WHY = {
    ("full", True): "'full' keeps more than the block input: part of the block's forward runs outside the "
                    "checkpoint, or the checkpoint keeps what it should rerun (checker hint lab7 "
                    "recompute.checkpointed).",
    ("full", False): "'full' keeps less than the block input: the checkpoint must hold the input to rerun the block "
                     "from it (checker hint lab7 recompute.checkpointed).",
    ("selective", True): "'selective' keeps more than the input and the Linears' outputs: the policy keeps some other "
                         "op's output (an a*s^2 attention tensor, a LayerNorm's, GELU's: cheap to rerun, not cheap to "
                         "store) (checker hint lab7 recompute.keep_matmuls).",
    ("selective", False): "'selective' keeps less than the input and the Linears' outputs: a Linear's output is "
                          "recomputed, not kept: the policy misses an op a Linear runs as (the policy sees each aten "
                          "overload; with a bias and without, a Linear is not the same op) (checker hint lab7 "
                          "recompute.keep_matmuls).",
}


@check("checkpoint_memory", "with apply_recompute 'full' a block keeps only its input (4 bsh); 'selective' "
       "its input + the Linear outputs; measured",
       f"A block keeps other than its contract ({WHERE}/recompute.py): 'full' off: the checkpoint does not hold "
       "exactly the block input (checker hint lab7 recompute.checkpointed); 'selective' alone: more kept, the "
       "policy keeps an op's output other than a Linear's; less kept, a Linear's output is recomputed (checker "
       "hint lab7 recompute.keep_matmuls)",
       runs={"memory"})
def checkpoint_memory(c: Check, runs) -> CheckResult:
    bad = _fail(c, runs, "memory")
    if bad:
        return bad
    r = runs["memory"].result
    cfg, notes, ok, why = r["cfg"], [], True, []
    for mode in ("full", "selective"):
        if r.get(f"{mode}_error"):
            return error_result(c, {**r[f"{mode}_error"], "message": f"{mode}: {r[f'{mode}_error']['message']}"},
                                "bytes")
        want = expected_bytes(**cfg, recompute=mode)
        ok &= r[mode] == want
        notes.append(f"{mode} {r[mode]:,} B (formula {want:,})")
        if r[mode] != want:
            why.append(CHECKPOINT_WHY[mode, r[mode] > want])
    return CheckResult(c.name, ok, value=r["full"], threshold=expected_bytes(**cfg, recompute="full"),
                       unit="bytes per block (full)", hint=" ".join(why) or c.hint,
                       message=f"per block, b={cfg['batch']} s={cfg['seq']} h={cfg['n_embd']}: " + ", ".join(notes)
                               + f"; no recomputation {r['fp32']:,} B")


@check("checkpoint_equivalence", "full and selective recomputation: loss and every gradient equal no "
       "recomputation's (dropout on, same seed), also with the embeddings frozen (no block input requires grad)",
       f"The rerun forward is not the one that ran ({WHERE}/recompute.py): most likely its dropout masks differ, "
       "as it starts from another random state; or, where the message says parameters got no gradient, the "
       "checkpoint differentiates only through inputs that require grad (checker hint lab7 "
       "recompute.checkpointed)",
       runs={"memory"}, crosscheck=True)
def checkpoint_equivalence(c: Check, runs) -> CheckResult:
    bad = _fail(c, runs, "memory", "equiv", "max abs diff")
    if bad:
        return bad
    e = runs["memory"].result["equiv"]
    worst = max(max(v["loss_diff"], v["grad_diff"]) for v in e.values())
    notes = ", ".join(f"{m}: loss {v['loss_diff']:.1e}, grads {v['grad_diff']:.1e}" for m, v in e.items())
    message = f"2 steps, dropout 0.1, vs no recomputation (and 1 with the embeddings frozen): {notes}"
    starved = [(m, v["no_grad"]) for m, v in e.items() if v.get("no_grad")]
    if starved:  # the reentrant checkpoint: the blocks' parameters get no gradient when no block input requires one
        m, n = starved[0]
        message = (f"{m}: {n} trainable parameters got no gradient (None) where no recomputation gives them one: with "
                   "the embeddings frozen the first block's input does not require grad, and a checkpoint that "
                   "differentiates only through its inputs (the reentrant one, use_reentrant=True) then cuts the "
                   "blocks' weights out of backward; the non-reentrant checkpoint the README asks for does not. "
                   + message)
    return CheckResult(c.name, worst <= EQUIV_TOL, value=worst, threshold=EQUIV_TOL, unit="max abs diff",
                       hint=c.hint, message=message)


def _x(cfg) -> float:
    """One forward of the blocks as a fraction of a step's FLOPs (forward 1 + backward 2)."""
    h, s, layers, v = cfg["n_embd"], cfg["seq"], cfg["n_layer"], cfg["vocab_size"]
    blocks = layers * (24 * h * h + 4 * s * h)  # per token: Linears 2*12h^2, attention QK^T and AV 2*2*s*h
    return blocks / (3 * (blocks + 2 * h * v))


@check("recompute_cost", "full recomputation's CPU time per step / no recomputation's, each side in a process of "
       "its own taking turns, is within the band the FLOP count gives (one more forward of the blocks)",
       f"Not one extra forward of the blocks ({WHERE}/recompute.py): below the band nothing is recomputed; above "
       "it a block reruns more than once or every op is traced (checker hint lab7 recompute.checkpointed)",
       runs={"timing", "timing_ref"})
def recompute_cost(c: Check, runs) -> CheckResult:
    """The step without recomputation runs in a run of the reference's (torch's code alone: the learner's package is
    never imported there), so learner code cannot slow it; the parent reads each window's CPU seconds from the
    kernel (checker/relay.py cpu_seconds), so no run reports its own time. The ratio: the window pairs' median."""
    unit = "CPU time per step, full / none"
    err = first_error(runs, "timing", "timing_ref")
    if not err:
        work = {"timing": TIMING["steps"], "timing_ref": TIMING["steps"]}  # the parent's own: no run says it
        rates, why = turn_rates(runs["timing"].relay, work, clock="cpu")
        err = {"type": "Untimed", "message": why} if why else None
    if err:
        return error_result(c, err, unit)
    mine, ref = runs["timing"].result.get("losses"), runs["timing_ref"].result["losses"]
    mine = mine if isinstance(mine, list) else []
    k = departs_at(mine, ref, EQUIV_TOL)
    if k is not None:
        return CheckResult(c.name, False, unit=unit, threshold=round(1 + COST_BAND[1] * _x(runs["timing_ref"].result[
            "cfg"]), 3), hint=c.hint, message=f"the timed steps did not compute the step without recomputation: step "
                       f"{k + 1}'s loss {loss_at(mine, k)} vs {loss_at(ref, k)} (same weights, batch and seed): a "
                       "step timed for its cost must do the whole step")
    ratio = paired_ratio(rates, "timing_ref", "timing")  # steps per CPU second: none's / full's = full's time / none's
    x = _x(runs["timing_ref"].result["cfg"])  # the reference's run's: the learner's run reports nothing graded
    lo, hi = 1 + COST_BAND[0] * x, 1 + COST_BAND[1] * x
    ok = lo <= ratio <= hi
    why = "" if ok else (" (more than one extra forward: a second forward, op tracing?)" if ratio > hi
                         else " (is anything recomputed?)")
    ms = {k: 1e3 / statistics.median(v) for k, v in rates.items()}
    return CheckResult(c.name, ok, value=round(ratio, 3), threshold=round(hi, 3), unit=unit, hint=c.hint,
                       message=f"median of {len(rates['timing'])} window pairs {ratio:.2f}x (CPU ms per step: "
                               f"full {ms['timing']:.1f}, none {ms['timing_ref']:.1f}); FLOPs say {1 + x:.2f}x; "
                               f"band {lo:.2f}-{hi:.2f}{why}")


@check("amp_equivalence", "train_step in bf16: the MLP's Linear computes in bfloat16; the first step's "
       "gradients equal the checker's bf16 recipe (forward and loss in autocast, backward outside); losses within "
       "1% of the checker's fp32 run; parameters, gradients and optimizer state stay fp32 (master weights)",
       f"Mixed precision changes the compute, not what is stored ({WHERE}/amp.py): forward and loss in the "
       "16-bit region of the dtype asked for, backward and the update outside it; masters, gradients and "
       "optimizer state stay fp32 (a 1e-3 update is below bf16's 0.4%) (checker hint lab7 amp.train_step)",
       runs={"amp"}, crosscheck=True)
def amp_equivalence(c: Check, runs) -> CheckResult:
    bad = _fail(c, runs, "amp", "bf16", "relative loss diff")
    if bad:
        return bad
    r = runs["amp"].result
    rel = max(abs(a - b) / abs(b) for a, b in zip(r["bf16"]["losses"], r["fp32"]))
    not32 = [d for d in r["bf16"]["dtypes"] if d != "torch.float32"]
    computed, gd, gmax = r["bf16"].get("computed"), r["bf16"].get("grad_diff"), r["bf16"].get("grad_max", 1.0)
    grads_ok = gd is not None and gd <= GRAD_TOL * gmax
    ok = (rel <= AMP_TOL and not not32 and len(r["bf16"]["losses"]) == len(r["fp32"])
          and computed == ["torch.bfloat16"] and grads_ok)
    msg = (f"{len(r['fp32'])} steps: loss {r['fp32'][0]:.3f} -> fp32 {r['fp32'][-1]:.4f}, bf16 "
           f"{r['bf16']['losses'][-1]:.4f}; worst step {rel:.1e} relative; step 1's gradients vs the checker's bf16 "
           f"recipe: {gd if gd is not None else float('nan'):.1e} max abs")
    if not grads_ok:
        msg = (("the optimizer was never handed gradients" if gd is None else
                f"step 1's gradients differ from the checker's bf16 recipe (forward and loss under autocast, backward "
                f"outside it; the same weights, batch and dropout masks) by up to {gd:.1e} (largest gradient "
                f"{gmax:.1e}): did backward run inside the autocast region? Inside it backward's ops are autocast "
                "again; outside, backward follows the dtypes forward recorded; ") + msg)
    if computed != ["torch.bfloat16"]:
        msg = (f"under precision 'bf16' the MLP's first Linear computed in {', '.join(computed or ['nothing'])}: the "
               "autocast region must compute in the dtype asked for (bfloat16 keeps fp32's exponent range, so it "
               "needs no loss scaling; float16 has the same 2 bytes but flushes gradients below 6e-8 and overflows "
               "past 65,504) (amp.autocast); " + msg)
    if not32:
        msg = f"parameters, gradients or optimizer state in {', '.join(not32)}: the masters must stay fp32; " + msg
    return CheckResult(c.name, ok, value=rel, threshold=AMP_TOL, unit="relative loss diff", hint=c.hint, message=msg)


@check("amp_memory", "under your autocast('cpu', 'bf16') a block keeps exactly the bf16 count (the checker's "
       "own), fewer than fp32",
       f"Nothing ran in 16 bits ({WHERE}/amp.py): most likely the region is opened for another device type than "
       "the tensors', or another dtype (checker hint lab7 amp.autocast)",
       runs={"memory"}, crosscheck=True)
def amp_memory(c: Check, runs) -> CheckResult:
    bad = _fail(c, runs, "memory", "bf16", "bytes")
    if bad:
        return bad
    r = runs["memory"].result
    want = r["bf16_ref"]  # the same block under the checker's own autocast('cpu', bfloat16), measured
    return CheckResult(c.name, r["bf16"] == want, value=r["bf16"], threshold=want, unit="bytes per block (bf16)",
                       hint=c.hint, message=f"bf16 {r['bf16']:,} B (under torch's own bf16 autocast: {want:,}) vs "
                                            f"fp32 {r['fp32']:,} B: {r['bf16'] / r['fp32']:.2f}x")


@check("loss_scaling", "fp16 with your LossScaler: the step with an injected inf gradient is skipped (weights "
       "unchanged), the next uses half the scale, weights stay finite and training continues; a small-"
       "growth_interval LossScaler driven through a NaN gradient skips that step, halves, then doubles after "
       "exactly G clean steps",
       f"See the message ({WHERE}/loss_scale.py): scale not halved or grown at the wrong step (checker hint "
       "lab7 loss_scale.update); loss not scaled (checker hint lab7 amp.train_step); an overflowed step changed "
       "the weights or a clean one got gradients not divided by the scale (checker hint lab7 loss_scale.step)",
       runs={"amp"}, crosscheck=True)
def loss_scaling(c: Check, runs) -> CheckResult:
    bad = _fail(c, runs, "amp", "fp16", "")
    if bad:
        return bad
    r = runs["amp"].result["fp16"]
    steps, scales, k = r["steps"], r["scales"], OVERFLOW_AT
    problems = []
    if r.get("dtypes", ["torch.float32"]) != ["torch.float32"]:
        problems.append(f"the parameters are {', '.join(r['dtypes'])} after fp16 training: the model itself was "
                        "cast, so updates below fp16's resolution are lost whatever the scaler does; the weights "
                        "stay fp32 and only the forward runs in fp16 (amp.train_step)")
    if r.get("computed", ["torch.float16"]) != ["torch.float16"]:
        problems.append(f"under precision 'fp16' the MLP's first Linear computed in {', '.join(r['computed'])}: "
                        "the autocast region must compute in float16 (amp.autocast)")
    if steps[k]["changed"]:
        problems.append(f"step {k + 1} (inf gradient) changed the weights: it must be skipped")
    bad_loss = [(i, st["loss_ratio"]) for i, st in enumerate(steps)
                if not LOSS_BAND[0] <= st.get("loss_ratio", 1.0) <= LOSS_BAND[1]]
    if bad_loss:
        i, ratio = bad_loss[0]
        problems.append(f"step {i + 1} returned a loss {ratio:.4g}x the checker's fp32 loss on the same weights: "
                        "train_step returns the loss itself, not the scaled loss backward started from")
    off = [(i, s["grad_ratio"]) for i, s in enumerate(steps)
           if i != k and s.get("grad_ratio") is not None and not GRAD_BAND[0] <= s["grad_ratio"] <= GRAD_BAND[1]]
    if off:
        i, ratio = off[0]
        problems.append(f"at step {i + 1} the optimizer was handed gradients {ratio:.4g}x the true ones (the loss "
                        f"scale was {scales[i]:g}" + ("): the scale was never divided out" if ratio > 8 else ")")
                        + " -- the update must see the gradient of the unscaled loss")
    if not all(s["finite"] for s in steps):
        problems.append(f"weights not finite after step {next(i for i, s in enumerate(steps) if not s['finite']) + 1}")
    if len(scales) > k + 1 and scales[k + 1] != scales[k] / 2:
        problems.append(f"scale {scales[k]:g} at the overflow, then {scales[k + 1]:g}: expected half")
    still = [i for i, st in enumerate(steps) if i != k and not st["changed"]]
    if still:
        i = still[0]
        grew = [f"{x:g}" for x in scales[:i + 1]]
        problems.append(f"step {i + 1} left the weights unchanged though the checker injected no inf there: your "
                        "scaler found an overflow of its own or skipped a good step (scales so far: "
                        f"{', '.join(grew)}; does update() grow the scale only after growth_interval clean steps?)")
    problems += _growth_problems(runs["amp"].result)
    if len(scales) != len(steps) or scales[0] <= 1:
        problems.append(f"the loss was scaled by {scales[:1]} (expected > 1 on every step)")
    ratios = [s["grad_ratio"] for i, s in enumerate(steps) if i != k and s.get("grad_ratio") is not None]
    seen = f"; gradients handed to the optimizer {min(ratios):.3f}-{max(ratios):.3f}x fp32's" if ratios else ""
    msg = problems[0] if problems else (f"injected inf at step {k + 1}: skipped, scale {scales[k]:g} -> "
                                        f"{scales[k + 1]:g}; {len(steps) - k - 1} more steps trained, weights "
                                        f"finite{seen}{_growth_seen(runs['amp'].result)}")
    return CheckResult(c.name, not problems, value=scales[k + 1] if len(scales) > k + 1 else None,
                       threshold=scales[k] / 2 if len(scales) > k else None, unit="scale after overflow",
                       hint=c.hint, message=msg)


def expected_growth(first: float, interval: int, overflow: int, n: int) -> list[float]:
    """The scales update() gives, step by step, from `first`: halved after the overflow step, doubled after
    `interval` clean steps in a row, the count restarting at 0 after either (loss_scale.py's contract)."""
    scales, s, clean = [], first, 0
    for i in range(n):
        scales.append(s)
        if i == overflow:
            s, clean = s / 2, 0
        else:
            clean += 1
            if clean == interval:
                s, clean = s * 2, 0
    return scales


def _growth_problems(amp) -> list[str]:
    """loss_scaling's side run: the learner's LossScaler(growth_interval=G) driven by the checker on one
    parameter, against the contract's scale at every step."""
    if amp.get("growth_error"):
        return [f"LossScaler(growth_interval=...) driven by the checker raised {amp['growth_error']['type']}: "
                f"{amp['growth_error']['message']}"]
    g = amp.get("growth")
    if not g:
        return []
    got, k, n = g["scales"], g["overflow"], g["interval"]
    want = expected_growth(got[0], n, k, len(got))
    if g.get("nan_step_skipped") is False or g.get("finite") is False:
        return [f"a LossScaler(growth_interval={n}) driven by the checker: step {k + 1}, whose gradient held a NaN "
                "the checker wrote, changed the weights" + ("; they are no longer finite" if not g["finite"] else "")
                + ": look for NaN as well as inf (torch.isfinite is False for both) and skip the step"]
    if got == want:
        return []
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    if i == k + 1:
        why = (f"the checker wrote a NaN into one gradient at step {k + 1}: a NaN is an overflow as much as an inf "
               "(fp16's inf becomes NaN in inf - inf or 0 x inf), so that step is skipped and the scale halves for "
               "the next")
    elif got[i] > want[i]:
        why = ("it doubled before growth_interval clean steps in a row: the count of clean steps restarts at 0 "
               "after an overflow and after each growth")
    else:
        why = "it doubled late or never: it doubles when the count of clean steps reaches growth_interval, not past it"
    return [f"a LossScaler(growth_interval={n}) driven by the checker ({k} clean step(s), an overflow, "
            f"{len(got) - k - 1} clean): scales used {', '.join(f'{x:g}' for x in got)}; expected "
            f"{', '.join(f'{x:g}' for x in want)}: at step {i + 1} {got[i]:g}, not {want[i]:g}: {why}"]


def _growth_seen(amp) -> str:
    g = amp.get("growth")
    return (f"; a LossScaler(growth_interval={g['interval']}) through a NaN gradient: skipped, scales "
            f"{', '.join(f'{x:g}' for x in g['scales'])}, as update's contract says") if g else ""


def reference_plan(budget: int) -> dict:
    """The checker's own plan: the first fit in the README's order (planner.py's contract)."""
    cfg, p = plan_cfg(), PLAN
    n, P, plan = p["world_size"], p["n_params"], None
    for mb in (m for m in range(p["batch"], 0, -1) if p["batch"] % m == 0):
        for rc in ("none", "selective", "full"):
            for st in range(4):
                state = 4 * P // (n if st >= 3 else 1) + 4 * P // (n if st >= 2 else 1) + 8 * P // (n if st >= 1 else 1)
                act = cfg["n_layer"] * expected_bytes(cfg["n_embd"], cfg["n_head"], mb, p["seq"], cfg["dropout"],
                                                      recompute=rc)
                total = state + act + 8 * mb * p["seq"] * cfg["vocab_size"]
                plan = dict(micro_batch=mb, grad_accum=p["batch"] // mb, recompute=rc, zero_stage=st, total=total,
                            fits=total <= budget)
                if plan["fits"]:
                    return plan
    return plan


@check("memory_plan", "plan_memory picks the first (micro-batch, recompute, ZeRO stage) that fits, in the "
       "README's order, with its grad_accum and the checker's byte count, at five budgets (at the last nothing "
       "fits: the last option tried, fits False)",
       f"Not the checker's plan ({WHERE}/planner.py): the order options are tried in is the contract, "
       "micro_batch x grad_accum is the batch, and nothing fitting still returns a plan (checker hint lab7 "
       "planner.plan_memory); every byte term counts (checker hint lab7 planner.step_bytes; activations: "
       "activations.py)",
       runs={"memory"})
def memory_plan(c: Check, runs) -> CheckResult:
    bad = _fail(c, runs, "memory", "plan", "plans right")
    if bad:
        return bad
    got, notes, right = runs["memory"].result["plan"], [], 0
    for gib, plan in zip(PLAN["budgets_gib"], got):
        want = reference_plan(int(gib * 2 ** 30))
        show = (f"micro-batch {want['micro_batch']} x {want['grad_accum']} accumulated, {want['recompute']}, "
                f"ZeRO-{want['zero_stage']}")
        if plan == want:
            right += 1
            notes.append(f"{gib} GiB: {show}, {want['total'] / 2 ** 30:.2f} GiB" + ("" if want["fits"] else
                                                                                      ", does not fit"))
        elif plan is None:
            notes.insert(0, f"{gib} GiB: got None; nothing fits there, and the contract returns the last option tried "
                            f"with fits False (expected {want}): the caller learns how far off the budget is")
        elif plan["grad_accum"] != want["grad_accum"] and {k: v for k, v in plan.items() if k != "grad_accum"} == \
                {k: v for k, v in want.items() if k != "grad_accum"}:
            notes.insert(0, f"{gib} GiB: grad_accum {plan['grad_accum']} with micro-batch {plan['micro_batch']}, "
                            f"expected {want['grad_accum']}: micro_batch x grad_accum must make the batch of "
                            f"{PLAN['batch']}")
        else:
            notes.insert(0, f"{gib} GiB: got {plan}, expected {want}")
    return CheckResult(c.name, right == len(got), value=right, threshold=len(PLAN["budgets_gib"]), unit="plans right",
                       hint=c.hint, message=f"{PLAN['config']}, {PLAN['world_size']} ranks, batch {PLAN['batch']} x "
                                            f"{PLAN['seq']}: " + "; ".join(notes))


def _fp8_part(c: Check, runs, part: str, unit: str):
    r = runs.get("fp8")
    res = r.result if r else None
    if res and res.get(part) is not None and not res.get(f"{part}_error"):
        return res[part], None
    err = (res or {}).get(f"{part}_error") or first_error(runs, "fp8") or {"type": "Crash", "message": "no result"}
    return None, error_result(c, err, unit)


@check("fp8_cast", "to_fp8 at scales 1, 1/8 and 1000 into e4m3 and e5m2, on values from 1e-3 to 1e5: every byte "
       "equals the checker's cast (round to nearest, saturated at 448 / 57,344), no inf or NaN",
       f"{WHERE}/fp8.py to_fp8: scale in fp32, then saturate at the format's largest finite value before the cast "
       "(torch casts e5m2 past 57,344 to inf), then cast.",
       runs={"fp8"}, crosscheck=True)
def fp8_cast(c: Check, runs) -> CheckResult:
    r, bad = _fp8_part(c, runs, "cast", "bytes wrong")
    if bad:
        return bad
    if "dtype" in r:
        return CheckResult(c.name, False, unit="dtype", hint=c.hint,
                           message=f"to_fp8 returned {r['dtype']}, not {r['want_dtype']}: return the fp8 tensor itself "
                                   "(1 byte an element), not its value in another dtype")
    if r["bad"]:
        b = r["bad"][0]
        why = f"; {r['nan']} inf or NaN (values past the format's largest, cast unsaturated)" if r["nan"] else ""
        return CheckResult(c.name, False, value=b["wrong"], threshold=0, unit="bytes wrong", hint=c.hint,
                           message=f"{b['dtype']} at scale {b['scale']}: {b['wrong']} of {b['of']} elements differ "
                                   f"from the checker's cast{why}")
    return CheckResult(c.name, True, value=0, threshold=0, unit="bytes wrong", hint=c.hint,
                       message=f"{r['cases']} casts (e4m3 and e5m2, scales 1, 1/8, 1000, values 1e-3 to 1e5): every "
                               "byte equal, saturated, none inf or NaN")


@check("fp8_delayed_scaling", "DelayedScaler(e4m3, history 3, margin 1) on a stream whose amax rises, falls and "
       "starts at zero: every scale used, every cast's bytes and the final amax history equal the checker's",
       f"{WHERE}/fp8.py DelayedScaler.cast: the scale a call uses comes from the PREVIOUS calls' amaxes (the "
       "largest of the last H), x's own amax enters the history after the cast, newest first, the oldest "
       "dropped; the margin divides the scale by 2^m; an all-zero history keeps 1.0.",
       runs={"fp8"}, crosscheck=True)
def fp8_delayed_scaling(c: Check, runs) -> CheckResult:
    r, bad = _fp8_part(c, runs, "delayed", "scales wrong")
    if bad:
        return bad
    for i, row in enumerate(r["rows"]):
        if abs(row["scale"] - row["want"]) > FP8_TOL * row["want"]:
            hint = (" (this call's own amax: that is current scaling, not delayed)" if i == 0 or row["scale"] != 1.0
                    else "")
            return CheckResult(c.name, False, value=row["scale"], threshold=row["want"], unit="scale used",
                               hint=c.hint, message=f"call {i + 1} (amax {FP8['amax'][i]}): scale {row['scale']:.6g}, "
                                                    f"expected {row['want']:.6g}{hint if i < 2 else ''}")
        if not row["bytes_ok"]:
            return CheckResult(c.name, False, unit="bytes", hint=c.hint,
                               message=f"call {i + 1}: the scale is right but the cast's bytes differ (to_fp8 with "
                                       "that scale?)")
    hist, want = r["history"], r["want_history"]
    if len(hist) != len(want) or any(abs(a - b) > FP8_TOL * max(b, 1e-30) for a, b in zip(hist, want)):
        return CheckResult(c.name, False, unit="amax history", hint=c.hint,
                           message=f"amax_history after the stream {[round(a, 4) for a in hist]}, expected "
                                   f"{[round(b, 4) for b in want]} (newest first, length H)")
    used = ", ".join(f"{x['want']:.3g}" for x in r["rows"])
    return CheckResult(c.name, True, value=len(r["rows"]), threshold=len(r["rows"]), unit="scales right",
                       hint=c.hint, message=f"{len(r['rows'])} casts, history {FP8['history']}, margin "
                                            f"{FP8['margin']}: scales {used}")


@check("fp8_linear", "Fp8Linear over 4 steps whose input and gradient magnitudes change: output, input gradient "
       "and weight gradient equal the checker's emulation (x, w in e4m3, the gradient in e5m2, each with its "
       "own delayed scaler) to 1e-6 relative",
       f"{WHERE}/fp8.py _Fp8Matmul.backward: gradients span more binades than they need digits: e5m2, through "
       "their own scaler; both products use the operands as fp8 holds them (dequantised), not the fp32 ones.",
       runs={"fp8"}, crosscheck=True)
def fp8_linear(c: Check, runs) -> CheckResult:
    r, bad = _fp8_part(c, runs, "linear", "relative diff")
    if bad:
        return bad
    names = ("output", "input gradient", "weight gradient")
    for step, d in enumerate(r["diffs"]):
        for name, x in zip(names, d):
            if not x <= FP8_TOL:
                return CheckResult(c.name, False, value=x, threshold=FP8_TOL, unit="relative diff", hint=c.hint,
                                   message=f"step {step + 1}: the {name} differs from the checker's emulation by "
                                           f"{x:.1e} of its largest value")
    worst = max(max(d) for d in r["diffs"])
    return CheckResult(c.name, True, value=worst, threshold=FP8_TOL, unit="relative diff", hint=c.hint,
                       message=f"{len(r['diffs'])} steps equal the emulation (within {worst:.1e}); fp8 vs exact fp32 "
                               f"output: {r['fp8_vs_fp32']:.2%} relative error")


CHECKS += fast.CHECKS  # fast_path, last: declared on its evaluator in fast.py, beside the runs it starts
