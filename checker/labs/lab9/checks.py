"""Lab 9's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): from the
runs' measurements to pass/fail. Thresholds are stated once, here, each with its reason; the byte formulas the
measurements are held to are the checker's own (formulas.py)."""
from __future__ import annotations

from checker.labs._common import Check, declare, error_result, every_rank, first_error
from checker.labs.lab9 import TOL, WHERE
from checker.labs.lab9.formulas import flash_bytes, ring_bytes_expected, ulysses_bytes_expected
from checker.report import CheckResult

BALANCE = 1.10     # zig-zag: per-rank FLOPs max/min. Tile-aligned chunks give exactly 1.00; the plain split N-1/2 : 1/2
CAUSAL_SHARE = 0.75  # causal FLOPs / the same code's non-causal ones, forward and backward each: 1/2 + O(tile/s)
P2P = ("send", "isend")

# One GPU shared over gloo: gloo moves no send/recv or all-to-all of CUDA tensors, and the course stages them
# through host memory (labs/common/staging.py), so every check runs there too
CHECKS: list[Check] = []
check = declare(CHECKS)


def _fwd_or_bwd(part) -> str:
    return "" if not part else " (forward)" if part == "the output" else " (a gradient: look at backward)"


@check("flash_equivalence", "flash_attention equals scaled_dot_product_attention in output and in the gradients "
       f"of q, k and v (atol {TOL:g}), causal and not, at sequence lengths that are not a multiple of the tile",
       f"The online softmax ({WHERE}/flash.py): when a tile raises a row's maximum, what was summed so far must be "
       "rescaled; backward rebuilds probabilities from the row's full log-sum-exp; the last tile of a row is "
       "shorter than the others; causal compares positions, key after query is masked.",
       runs={"flash"}, crosscheck=True)
def flash_equivalence(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "flash", "equiv")
    if err:
        return error_result(c, err, "max abs diff")
    diffs, cases = rs[0], runs["flash"].result["cases"]
    worst = max(diffs)
    rows = [f"b={b} h={h} s={s} d={d} {'causal' if cz else 'full'} tiles {bq}x{bk}: {x:.1e}"
            for (b, h, s, d, cz, bq, bk), x in zip(cases, diffs)]
    res = runs["flash"].result
    worst_parts = res.get("worst") or [None] * len(rows)
    bad = [f"{r}, most in {w}{_fwd_or_bwd(w)}" if w else r for r, x, w in zip(rows, diffs, worst_parts) if not x <= TOL]
    if not bad and res.get("merge_error"):
        return error_result(c, res["merge_error"], "max abs diff")
    merge_bad = [f"{kind} ({'a NaN or a wrong -inf' if x == float('inf') else f'off by {x:.1e}'})"
                 for kind, x in (res.get("merge") or {}).items() if not x <= TOL]
    if not bad and merge_bad:
        return CheckResult(c.name, False, threshold=TOL, unit="max abs diff (merge's o, lse)", hint=c.hint, message=(
            "flash_attention equals SDPA, but merge(o1, lse1, o2, lse2) differs from the merge of the two partial "
            f"results in rows where {'; '.join(merge_bad)}. A side whose lse is -inf saw no key: it must leave the "
            "other side as it is, even when the other saw none either"))
    return CheckResult(c.name, not bad, value=worst, threshold=TOL, unit="max abs diff (output, dq, dk, dv)",
                       hint=c.hint, message=("vs SDPA: " + "; ".join(rows)) if not bad else
                       f"differs from SDPA at {bad[0]}" + (" (a shape mismatch)" if worst == float("inf") else ""))


@check("flash_memory", "the bytes flash_attention's forward leaves for backward (measured: every storage its ops "
       "created that the autograd graph still holds, output aside) <= 3 inputs + one fp32 per row: 12bhsd + 4bhs, "
       "no s x s tensor",
       f"Keep for backward only what its tile loop reads ({WHERE}/flash.py): the inputs, the output and one "
       "number per query row; anything of size s x s (scores, probabilities, masks) must be rebuilt per tile.",
       runs={"flash"})
def flash_memory(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "flash", "mem")
    if err:
        return error_result(c, err, "bytes")
    m, (b, h, s, d, tile) = rs[0], runs["flash"].result["mem_shape"]
    want = flash_bytes(b, h, s, d)
    worst = max(m["full"]["bytes"], m["causal"]["bytes"])
    square = 4 * b * h * s * s
    ok = worst <= want
    why = ""
    if not ok:
        big = max(m["full"]["largest"], m["causal"]["largest"])
        why = (f"; the largest kept tensor is {big:,} B" + (f" (s x s per head is {square:,} B: a score or probability "
                                                            "matrix survives forward)" if big >= square else ""))
    return CheckResult(c.name, ok, value=worst, threshold=want, unit="bytes kept for backward",
                       hint=c.hint, message=f"b={b} h={h} s={s} d={d}, tiles {tile}: kept {m['full']['bytes']:,} B "
                                            f"(causal {m['causal']['bytes']:,} B), formula 4(3bhsd + bhs) = "
                                            f"{want:,} B; the textbook formula keeps {m['naive']['bytes']:,} B" + why)


@check("ring_equivalence", "ring_attention on N = 2 or 3 ranks, contiguous and zig-zag shards, causal and not: "
       "each rank's output rows and its rows of dq, dk, dv equal full attention's",
       f"In the ring ({WHERE}/ring.py) a block's keys come from another rank: the causal mask compares GLOBAL "
       "positions (whose block is it at this step?); partial outputs merge by their log-sum-exp; K and V travel "
       "together; each block's dK, dV must end on the rank that owns it. Zig-zag: chunks r then 2N-1-r "
       f"({WHERE}/zigzag.py).",
       runs={"ring"}, crosscheck=True)
def ring_equivalence(c: Check, runs) -> CheckResult:
    notes, worst = [], 0.0
    for part, label in (("contiguous", "contiguous causal"), ("zigzag", "zig-zag causal"), ("full", "not causal")):
        rs, err = every_rank(runs, "ring", part)
        if err:
            return error_result(c, {**err, "message": f"{label}: {err.get('message', '')}"}, "max abs diff")
        d = max(r["diff"] for r in rs)
        worst = max(worst, d)
        notes.append(f"{label} {d:.1e}")
        if not d <= TOL:
            where = next(i for i, r in enumerate(rs) if not r["diff"] <= TOL)
            return CheckResult(c.name, False, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                               message=f"{label}, {len(rs)} ranks: rank {where}'s rows differ from full attention by "
                                       f"{d:.1e}, most in {rs[where].get('worst', 'the output or a gradient')}"
                                       + _fwd_or_bwd(rs[where].get("worst")))
    n = runs["ring"].result["world"]
    return CheckResult(c.name, True, value=worst, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"{n} ranks, shape {runs['ring'].result['shape']} (b, h, s, d), each rank's rows vs "
                               "full attention (output, dq, dk, dv): " + ", ".join(notes))


@check("ring_bytes", "bytes each rank sends, counted from its point-to-point calls: forward 2(N-1)/N of K and V, "
       "backward 2(N-1)/N of K and V + dK and dV once round the ring (2 S), nothing else",
       f"Each step passes on exactly the block it holds, once ({WHERE}/ring.py): no send at the last step of "
       "forward; backward's running dK, dV make N hops back to their owner; an all-gather of K/V moves the same "
       "forward bytes but holds the whole sequence on every rank.",
       runs={"ring"})
def ring_bytes(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "ring", "contiguous")
    if err:
        return error_result(c, err, "bytes sent per rank")
    res = runs["ring"].result
    n = res["world"]
    want_f, want_b = ring_bytes_expected(*res["shape"], n)
    problems = []
    for rank, r in enumerate(rs):
        ops = sorted({op for op, _, _ in r["fwd"] + r["bwd"]} - set(P2P))
        f, b = sum(x[2] for x in r["fwd"]), sum(x[2] for x in r["bwd"])
        if ops:
            problems.append(f"rank {rank} called {', '.join(ops)}: the ring passes blocks with point-to-point sends")
        if f != want_f or b != want_b:
            problems.append(f"rank {rank} sent {f:,.0f} B forward, {b:,.0f} B backward; expected {want_f:,.0f} and "
                            f"{want_b:,.0f}")
    f0 = sum(x[2] for x in rs[0]["fwd"])
    b, h, s, d = res["shape"]
    return CheckResult(c.name, not problems, value=f0, threshold=want_f, unit="bytes sent per rank, forward",
                       hint=c.hint, message=problems[0] if problems else
                       f"{n} ranks, K = V = {4 * b * h * s * d:,} B: every rank sent {want_f:,.0f} B forward "
                       f"= 2(N-1)/N S, {want_b:,.0f} B backward = 2(N-1)/N S + 2S, in {len(rs[0]['fwd'])} + "
                       f"{len(rs[0]['bwd'])} sends")


@check("ring_overlap", "in ring_attention's forward every K/V transfer is in flight while tile matmuls run: "
       "between starting each receive and waiting for it, the checker sees matmuls (observed beneath your code)",
       f"Start the next block's transfer before this block's tiles and wait for it after them ({WHERE}/ring.py): "
       "non-blocking point-to-point; a blocking send, or a wait right after starting it, leaves the link and the "
       "cores taking turns.",
       runs={"ring"})
def ring_overlap(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "ring", "overlap")
    if err:
        return error_result(c, err, "transfers overlapped")
    n = runs["ring"].result["world"]
    want = n - 1  # forward: one receive per step but the last
    hidden = [sum(1 for k in r["tiles_in_flight"] if k > 0) for r in rs]
    ok = all(h == want and len(r["tiles_in_flight"]) == want for h, r in zip(hidden, rs))
    if ok:
        msg = (f"{n} ranks: each of the {want} K/V transfers per rank had tile matmuls running while in flight "
               f"({', '.join(str(r['tiles_in_flight']) for r in rs)} matmuls per transfer, rank by rank)")
    elif not any(r["tiles_in_flight"] for r in rs):
        msg = ("no non-blocking receive seen (ops: " + ", ".join(rs[0]["ops"] or ["none"]) + "): blocking sends "
               "cannot overlap the tile math")
    else:
        rank = next(i for i, (h, r) in enumerate(zip(hidden, rs)) if h != want or len(r["tiles_in_flight"]) != want)
        got = len(rs[rank]["tiles_in_flight"])
        msg = (f"rank {rank}: {hidden[rank]} of {got} receives had matmuls running while in flight (expected {want} "
               f"of {want}): " + (f"{got} receives where a forward over {n} blocks needs {want}: a transfer after the "
                                  "last block?" if got > want else
                                  f"{got} receives where a forward over {n} blocks needs {want}" if got < want else
                                  "it waited for a transfer before computing on the block it already held"))
    return CheckResult(c.name, ok, value=min(hidden), threshold=want, unit="transfers overlapped per rank",
                       hint=c.hint, message=msg)


@check("zigzag_balance", "per-rank matmul FLOPs of ring_attention's causal forward and backward on zig-zag shards "
       "(counted by the checker) within 10% of each other, and tiles above the diagonal skipped in both passes "
       "(each <= 3/4 of the same code's non-causal FLOPs)",
       f"Zig-zag ({WHERE}/zigzag.py): rank r holds chunks r and 2N-1-r of 2N, so every rank sees as many "
       "(query, key) pairs; the ring must skip tiles whose keys all lie after their queries (flash.py), or "
       "causal costs as much as full attention.",
       runs={"ring"})
def zigzag_balance(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "ring", "flops_zigzag")
    if err:
        return error_result(c, err, "max/min FLOPs per rank")
    plain, _ = every_rank(runs, "ring", "flops_contiguous")
    full, ferr = every_rank(runs, "ring", "flops_noncausal")
    if ferr:
        return error_result(c, ferr, "max/min FLOPs per rank")
    b, h, s, d = runs["ring"].result["balance_shape"]
    # each rank's [forward, backward] FLOPs, causal vs the same code not causal: tiles skipped in both passes
    shares = {p: sum(r[k] for r in rs) / max(sum(r[k] for r in full), 1) for k, p in enumerate(("forward", "backward"))}
    rs = [sum(r) for r in rs]
    plain = [sum(r) for r in plain] if plain else plain
    ratio = max(rs) / max(min(rs), 1)
    share = sum(rs) / max(sum(sum(r) for r in full), 1)
    shown = f"plain split {max(plain) / max(min(plain), 1):.1f}x" if plain else "plain split not measured"
    worst = max(shares, key=shares.get)
    if shares[worst] > CAUSAL_SHARE:  # the quantity that failed is the one measured
        return CheckResult(c.name, False, value=round(shares[worst], 3), threshold=CAUSAL_SHARE,
                           unit=f"causal / non-causal FLOPs ({worst})", hint=c.hint,
                           message=f"causal attention's {worst} cost {shares[worst]:.2f} of the same code's non-causal "
                                   f"{worst} (> {CAUSAL_SHARE}): tiles above the diagonal are computed in {worst}, "
                                   "not skipped")
    return CheckResult(c.name, ratio <= BALANCE, value=round(ratio, 3), threshold=BALANCE,
                       unit="max/min matmul FLOPs per rank", hint=c.hint,
                       message=(f"per-rank FLOPs {', '.join(f'{x:,}' for x in rs)}: max/min {ratio:.2f} > {BALANCE}"
                                if ratio > BALANCE else
                                f"{len(rs)} ranks, s={s}: zig-zag per-rank FLOPs (fwd + bwd) "
                                f"{', '.join(f'{x:,}' for x in rs)} (max/min {ratio:.2f}; {shown}); {share:.2f} of "
                                "the non-causal FLOPs"))


@check("ulysses_equivalence", "ulysses_attention on N ranks: each rank's output rows and gradients equal full "
       "attention's; heads not divisible by N raise ValueError",
       f"The re-shard ({WHERE}/ulysses.py): peer j must receive its own heads of your rows and put them at "
       "sequence position j*s/N; the way back is the inverse, and each is the other's gradient. Check "
       "heads % N before any communication.",
       runs={"ulysses"}, crosscheck=True)
def ulysses_equivalence(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "ulysses", "equiv")
    if err:
        return error_result(c, err, "max abs diff")
    res = runs["ulysses"].result
    d = max(r["diff"] for r in rs)
    if not d <= TOL:
        return CheckResult(c.name, False, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                           message=f"{res['world']} ranks: output rows or gradients differ from full attention by "
                                   f"{d:.1e}")
    un, err = every_rank(runs, "ulysses", "uneven")
    if err:
        return error_result(c, {**err, "message": f"heads not divisible by ranks: {err.get('message', '')}"}, "")
    u = un[0]
    if u["raised"] != "ValueError":
        what = f"raised {u['raised']}: {u['message'][:120]}" if u["raised"] else "returned without an error"
        return CheckResult(c.name, False, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                           message=f"{res['shape'][1] + 1} heads on {res['world']} ranks {what}; expected a ValueError "
                                   "that says the heads must divide over the ranks")
    return CheckResult(c.name, True, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"{res['world']} ranks, shape {res['shape']} (b, h, s, d): output and gradients vs full "
                               f"attention {d:.1e}; {res['shape'][1] + 1} heads: ValueError "
                               f"({u['message'] if len(u['message']) <= 160 else u['message'][:157] + '...'})")


@check("ulysses_bytes", "bytes each rank sends in Ulysses, counted from its collectives: 4 all-to-alls of its "
       "(b, h, s/N, d) block forward, (N-1)/N of each, and the same backward",
       f"Four re-shards per direction ({WHERE}/ulysses.py): q, k and v to heads, the output back; one "
       "all-to-all each, no all-gather of the sequence (that sends N times more).",
       runs={"ulysses"})
def ulysses_bytes(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "ulysses", "equiv")
    if err:
        return error_result(c, err, "bytes sent per rank")
    res = runs["ulysses"].result
    want = ulysses_bytes_expected(*res["shape"], res["world"])
    problems = []
    for rank, r in enumerate(rs):
        for label, recs in (("forward", r["fwd"]), ("backward", r["bwd"])):
            got = sum(x[2] for x in recs)
            if got != want:
                ops = ", ".join(sorted({x[0] for x in recs})) or "nothing"
                problems.append(f"rank {rank} sent {got:,.0f} B in {label} ({ops}); expected {want:,.0f} B")
    a2a = len(rs[0]["fwd"])
    return CheckResult(c.name, not problems, value=sum(x[2] for x in rs[0]["fwd"]), threshold=want,
                       unit="bytes sent per rank, forward", hint=c.hint, message=problems[0] if problems else
                       f"{res['world']} ranks: {want:,.0f} B each way per rank = 4 (N-1)/N of its block, in {a2a} "
                       "collectives forward")


@check("cp_dp_equivalence", "a CP x DP step of the tiny GPT (dp 2 x cp 2, zig-zag tokens, the model's code "
       "unchanged): loss, every gradient and every weight after the update equal one process's step on the "
       f"global batch (atol {TOL:g})",
       f"Each rank sees its own tokens ({WHERE}/cp_step.py): they sit at GLOBAL positions, which the position "
       "embedding must be given; each rank's gradient is its tokens' share of the mean, to be combined over "
       "every rank of both dimensions.",
       runs={"cp"}, crosscheck=True)
def cp_dp_equivalence(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "cp", "step")
    if err:
        return error_result(c, err, "max abs diff")
    problems = [p for r in rs for p in r["problems"]]
    if problems:
        return CheckResult(c.name, False, unit="max abs diff", hint=c.hint, message=problems[0])
    d = {k: max(r[k] for r in rs) for k in ("grad", "weight")}
    d["loss"] = max(abs(r["loss"] - r["want_loss"]) for r in rs)
    worst = max(d.values())
    return CheckResult(c.name, worst <= TOL, value=worst, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"{len(rs)} ranks (dp 2 x cp 2), vs one process on the global batch: loss "
                               f"{d['loss']:.1e} ({rs[0]['want_loss']:.4f}), gradients {d['grad']:.1e}, weights after "
                               f"the update {d['weight']:.1e}")


def _cp_run_error(runs, name: str, label: str):
    """The first error of one of the resume check's runs, as its part reported it (build, load, train), or None."""
    rs = runs[name].results if name in runs else []
    for part in ("build", "load", "train"):
        if any(r.get(f"{part}_error") for r in rs):
            # with any rank's run-ending error (the watchdog's Stuck): the peers it left waiting say "closed by peer"
            errs = [(i, e) for i, r in enumerate(rs) for e in (r.get(f"{part}_error"), r.get("error")) if e]
            first, err = min(errs, key=lambda x: ("closed by peer" in x[1].get("message", ""), x[1].get("t", 0)))
            # a rank that waited for ever: where its peers were is the other half of the mismatch
            peers = "; ".join(f"rank {i} was at {e['where']}" for i, e in errs if i != first and e.get("where")
                              and e["where"] != err.get("where")) if err.get("type") == "Stuck" else ""
            return {**err, "message": f"{label}: rank {first}: {err.get('message', '')}"
                                      + (f" ({peers})" if peers else "")}
    err = first_error(runs, name)
    return {**err, "message": f"{label}: {err.get('message', '')}"} if err else None


def resume_decided(runs) -> dict | str | None:
    """The error, or the message, that fails cp_resume where the uninterrupted and the killed jobs decide
    it already: no resumed job is then started (the grade's last phase, ~10 s on 2 cores)."""
    for name, label in (("cp_full", "the uninterrupted job"), ("cp_killed", "the job to be killed")):
        err = _cp_run_error(runs, name, label)
        if err:
            return err
    if not runs["cp_killed"].killed_on_cue:
        return "the job to be killed never reached the write of its second checkpoint"
    killed_res = runs["cp_killed"].results
    if not any(r.get("held") for r in killed_res):
        return (f"the save after step {killed_res[0]['kill_at']} wrote nothing through torch.save or "
                "torch.distributed.checkpoint, so the checker could not kill the job inside its write to prove it "
                "atomic: write the checkpoint with one of them (labs.common.checkpoint.atomic_save calls torch.save)")
    early = [i for i, r in enumerate(killed_res) if r.get("returned")]
    if early:  # the held write never ends: a rank that returned did so before the checkpoint was on disk
        holder = next(i for i, r in enumerate(killed_res) if r.get("held"))
        return (f"the save after step {killed_res[0]['kill_at']}: save_cp_checkpoint returned on rank(s) "
                f"{', '.join(map(str, early))} while rank {holder} was still writing the checkpoint (the checker held "
                "that write): on return, on any rank, the path must hold the whole state, so no rank may return "
                "before every write of it is done")
    return None


@check("cp_resume", "a CP x DP job (dp 2 x cp 2, AdamW, a warm-up schedule) saves, trains on, and is SIGKILLed "
       "inside its next save's write; fresh processes resume it: the checkpoint that loads is the last complete "
       "one, and the weights after every later step are bit-identical to the uninterrupted job's",
       f"What must a fresh job hold to take the next step as this one would, and how many copies of it does a CP x "
       f"DP mesh have ({WHERE}/cp_checkpoint.py)? CP splits tokens, not parameters. A kill halfway through a "
       "write must leave the previous checkpoint whole: write elsewhere, then rename.",
       runs={"cp_full", "cp_killed", "cp_resumed"})
def cp_resume(c: Check, runs) -> CheckResult:
    unit = "steps bit-identical after the resume"
    decided = resume_decided(runs)
    if isinstance(decided, dict):
        return error_result(c, decided, unit)
    if decided:
        return CheckResult(c.name, False, unit=unit, hint=c.hint, message=decided)
    killed_res = runs["cp_killed"].results
    held = next(f"{r.get('held_path', 'its file')} half-written" for r in killed_res if r.get("held"))
    save_at, kill_at = killed_res[0]["save_at"], killed_res[0]["kill_at"]
    err = _cp_run_error(runs, "cp_resumed", "the resumed job")
    if err:
        if any(r.get("load_error") for r in runs["cp_resumed"].results):
            err["message"] = (f"the resumed job: the checkpoint left by a kill inside the save after step {kill_at} "
                              f"({held}) does not load: {err['message'].removeprefix('the resumed job: ')}")
        return error_result(c, err, unit)
    full, killed, resumed = ([r["trained"] for r in runs[n].results] for n in ("cp_full", "cp_killed", "cp_resumed"))
    problems = []
    for rank, (f, k) in enumerate(zip(full, killed)):
        if [x[2] for x in k] != [x[2] for x in f[:len(k)]]:
            i = next(i for i, (a, b) in enumerate(zip(k, f)) if a[2] != b[2])
            problems.append(f"rank {rank}: the job that saved differs from the uninterrupted one after step {k[i][0]}: "
                            "a save must not change training")
    starts = {r["start"] for r in runs["cp_resumed"].results}
    if starts != {save_at}:
        problems.append(f"load_cp_checkpoint returned step {', '.join(map(str, sorted(starts)))}; the last complete "
                        f"checkpoint was saved after step {save_at} (the save after step {kill_at} was killed inside "
                        f"its write, {held})")
    for rank, (f, r) in enumerate(zip(full, resumed)):
        want = {x[0]: x for x in f}
        bad = next((x for x in r if x[0] not in want or want[x[0]][2] != x[2]), None)
        if not r:
            problems.append(f"rank {rank}: the resumed job took no step")
        elif bad and bad[0] in want:
            got_loss, want_loss = float.fromhex(bad[1]), float.fromhex(want[bad[0]][1])
            why = (f"that step's loss, taken before its update, is the same ({got_loss:.6f}): it saw the same "
                   "weights and tokens, and its update differed (the optimizer's state, the learning rate?)"
                   if got_loss == want_loss else
                   f"that step's loss {got_loss:.6f} vs {want_loss:.6f}: it saw other weights or other tokens")
            problems.append(f"rank {rank}: after the resume the weights differ from the uninterrupted job's from step "
                            f"{bad[0]} on; {why}")
        elif bad:
            problems.append(f"rank {rank}: the resumed job took step {bad[0]}, which the uninterrupted job never took")
    same = min(sum(1 for x in r if {y[0]: y[2] for y in f}.get(x[0]) == x[2]) for f, r in zip(full, resumed))
    want_steps = len(full[0]) - save_at
    if not problems and same < want_steps:
        problems.append(f"the resumed job took {same} of steps {save_at + 1}-{full[0][-1][0]}")
    return CheckResult(c.name, not problems, value=same, threshold=want_steps, unit=unit, hint=c.hint,
                       message=problems[0] if problems else
                       f"4 ranks (dp 2 x cp 2): saved after step {save_at}, killed inside the save after step "
                       f"{kill_at} ({held}); fresh processes loaded step {save_at} and took steps {save_at + 1}-"
                       f"{full[0][-1][0]} with weights bit-identical to the uninterrupted job's on every rank")
