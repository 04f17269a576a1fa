"""Lab 10's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): from the
runs' measurements to pass/fail. Thresholds and the checker's own byte formula are stated once, here, each with its
reason."""
from __future__ import annotations

from checker.labs._common import Check, declare, error_result, every_rank, first_error
from checker.labs._held_save import TORN, last_complete, wrong_start
from checker.labs.lab10 import AUX_RTOL, TOL, WHERE
from checker.labs.lab10.shapes import BALANCE
from checker.report import CheckResult

BALANCED = 1.25  # max / mean tokens per expert over the last 10 of BALANCE's steps; the reference: 1.06 (from 1.97)

CHECKS: list[Check] = []
check = declare(CHECKS)


def a2a_bytes_expected(rows_out: int, rows_in: int, hidden: int) -> int:
    """fp32 bytes one rank sends in one direction (forward, and again backward): the kept rows it dispatches to
    other ranks' experts plus the results it returns to the ranks whose rows it received, 4h B per row."""
    return (rows_out + rows_in) * 4 * hidden


def _worst(diffs: dict) -> tuple[str, float]:
    name = max(diffs, key=lambda k: diffs[k])
    return name, diffs[name]


@check("router_equivalence", "route: the k experts of every token (exactly, ties to the lower index, with and "
       f"without a selection bias), their renormalised weights and the weights' gradient (atol {TOL:g}) equal "
       "the contract's, at token and expert counts the starter never used",
       f"{WHERE}/router.py: the bias decides who is chosen, never how much they count; weights are the chosen "
       "probabilities divided by their sum; equal values go to the lower expert index (is your sort stable?).",
       runs={"units"}, crosscheck=True)
def router_equivalence(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "units", "router")
    if err:
        return error_result(c, err, "max abs diff")
    worst = 0.0
    for row in rs[0]:
        T, E = row["shape"]
        label = f"{T} tokens, {E} experts, top-{row['k']}" + (", with a bias" if row["bias"] else "")
        if row["ids_bad"]:
            t, got, want = row["ids_bad"]
            why = {0: " (every expert ties in this token: equal values go to the lower index)",
                   1: " (experts 0 and 1 tie for first: the lower index first)"}.get(t, "")
            if row["bias"] and not why:
                why = " (the bias decides who is chosen: softmax + bias, never the scores + bias)"
            if row["scores"] != "torch.float32" and not why:
                why = f" (scores in {row['scores'].split('.')[-1]}: the probabilities in float32)"
            return CheckResult(c.name, False, unit="experts chosen", hint=c.hint,
                               message=f"{label}: token {t} got experts {got}, expected {want}{why}")
        if row["dtype"] != "torch.float32":
            return CheckResult(c.name, False, unit="dtype", hint=c.hint,
                               message=f"{label}: weights are {row['dtype']} for {row['scores']} scores: the contract "
                                       "asks float32 whatever the scores' dtype (softmax in float32)")
        if row["grad"] is None:
            return CheckResult(c.name, False, unit="max abs diff", hint=c.hint,
                               message=f"{label}: the weights carry no gradient to the scores (detached, or built "
                                       "from values): they must come from the probabilities, differentiable (at "
                                       "top-1 their gradient is zero, but it must exist)")
        for name, d in (("the weights", row["weights"]), ("the weights' gradient", row["grad"])):
            worst = max(worst, d)
            if not d <= TOL:
                return CheckResult(c.name, False, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                                   message=f"{label}: {name} differ by {d:.1e} (weights: the chosen probabilities "
                                           "divided by their sum, the bias left out)")
    return CheckResult(c.name, True, value=worst, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"{len(rs[0])} cases, ties and a bias among them: experts exact, weights and their "
                               f"gradient within {worst:.1e}")


@check("capacity_drops", "capacity = ceil(factor T k / E) and keep_mask keeps exactly the choices the rule "
       "keeps: first choices in token order, then second choices (dropped choices per expert compared)",
       f"{WHERE}/capacity.py: an expert's slots go to every token's FIRST choice before any second one; the "
       "count is per expert, not over all experts; a choice past the capacity is dropped, not moved elsewhere.",
       runs={"units"}, crosscheck=True)
def capacity_drops(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "units", "capacity")
    if err:
        return error_result(c, err, "choices")
    r = rs[0]
    for (T, k, E, f), got, want in r["caps"]:
        if got != want:
            return CheckResult(c.name, False, value=got, threshold=want, unit="slots per expert", hint=c.hint,
                               message=f"capacity(T={T}, k={k}, E={E}, factor={f}) = {got}, expected "
                                       f"ceil({f} x {T} x {k} / {E}) = {want}")
    if r["n_wrong"]:
        t, j = r["wrong"][0]
        return CheckResult(c.name, False, value=r["n_wrong"], threshold=0, unit="choices kept wrongly", hint=c.hint,
                           message=f"200 tokens, top-2 of 8, {r['cap']} slots each: {r['n_wrong']} choices kept or "
                                   f"dropped against the rule, first token {t} choice {j}; dropped per expert "
                                   f"{r['dropped']}, expected {r['want_dropped']}")
    return CheckResult(c.name, True, value=0, threshold=0, unit="choices kept wrongly", hint=c.hint,
                       message=f"{len(r['caps'])} capacities exact; 200 tokens, top-2 of 8, {r['cap']} slots each: "
                               f"dropped per expert {r['dropped']}, as the rule says")


@check("aux_loss", "load_balancing_loss equals E sum_e f_e P_e and its gradient with respect to the router's "
       "scores equals the formula's (f a count, P the mean probability)",
       f"{WHERE}/router.py: f counts choices (every one of the T k, before capacity drops) and has no gradient; "
       "P = mean probability per expert carries it. A loss on detached probabilities balances nothing.",
       runs={"units"}, crosscheck=True)
def aux_loss(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "units", "aux")
    if err:
        return error_result(c, err, "loss")
    a = rs[0]
    rel = abs(a["value"] - a["want"]) / abs(a["want"])
    if not rel <= AUX_RTOL:
        return CheckResult(c.name, False, value=a["value"], threshold=a["want"], unit="aux loss", hint=c.hint,
                           message=f"50 tokens, top-2 of 5: loss {a['value']:.6f}, the formula gives {a['want']:.6f} "
                                   "(1.0 would mean balanced routing)")
    if a["grad"] is None:
        return CheckResult(c.name, False, unit="gradient", hint=c.hint,
                           message="the loss has no gradient with respect to the router's scores: P must be the mean "
                                   "of the probabilities you were given, not detached ones")
    ok = a["grad"] <= TOL
    return CheckResult(c.name, ok, value=a["grad"], threshold=TOL, unit="max abs diff of the gradient", hint=c.hint,
                       message=f"value {a['value']:.6f} = the formula's; gradient " + (
                           f"within {a['grad']:.1e}" if ok else f"differs by {a['grad']:.1e} (norm "
                           f"{a['grad_norm']:.1e}): does a gradient flow through f, or P computed from other than "
                           "the probabilities?"))


@check("moe_equivalence", "MoE with the checker's weights loaded (router.weight, w1, w2, bias): output, gradients "
       f"of the input and every weight (atol {TOL:g}), .aux_loss and .counts equal the reference's, with choices "
       "dropped and a non-zero bias",
       f"{WHERE}/moe.py: a token's output sums weight x expert over its KEPT choices only; a dropped choice adds "
       "nothing (the block's residual carries the token); each expert runs on the rows that chose it.",
       runs={"units"}, crosscheck=True)
def moe_equivalence(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "units", "moe")
    if err:
        return error_result(c, err, "max abs diff")
    worst = 0.0
    for i, r in enumerate(rs[0]):
        label = "with a selection bias" if i else "bias 0"
        name, d = _worst(r["diffs"])
        worst = max(worst, d)
        if not d <= TOL:
            return CheckResult(c.name, False, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                               message=f"{label}, {r['dropped']} choices dropped: {name} "
                                       f"{'differs' if name == 'output' else 'gradient differs'} by {d:.1e}")
        if abs(r["aux"] - r["want_aux"]) > AUX_RTOL * abs(r["want_aux"]):
            return CheckResult(c.name, False, value=r["aux"], threshold=r["want_aux"], unit="aux loss", hint=c.hint,
                               message=f"{label}: .aux_loss {r['aux']:.6f}, the reference's {r['want_aux']:.6f}")
        if r["counts"] != r["want_counts"]:
            return CheckResult(c.name, False, unit="tokens per expert", hint=c.hint,
                               message=f"{label}: .counts {r['counts']}, expected {r['want_counts']} (choices routed "
                                       "to each expert, before capacity drops)")
    return CheckResult(c.name, True, value=worst, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"output and gradients within {worst:.1e}, {rs[0][0]['dropped']} and "
                               f"{rs[0][1]['dropped']} choices dropped; .aux_loss and .counts equal")


@check("moe_grouped", "grouped compute, counted beneath your code: keep_mask runs as many ops for 3T tokens as for "
       "T; MoE.forward runs at most 2E + 1 matmuls (each expert's two weights once, the router) at both; each "
       "rank's expert_parallel forward at most 2E/N + 1",
       f"{WHERE}/moe.py, capacity.py, expert_parallel.py: the work per expert must be one matmul per weight over "
       "all of its rows (gather them, run, scatter back), never a Python loop over tokens or choices, and an EP "
       "rank runs each local expert once on the rows from every rank together.",
       runs={"units", "ep"})
def moe_grouped(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "units", "grouped")
    if err:
        return error_result(c, err, "ops")
    g = rs[0]
    E = g["experts"]
    if g["keep_ops_300"] > g["keep_ops_100"]:
        return CheckResult(c.name, False, value=g["keep_ops_300"], threshold=g["keep_ops_100"], unit="ops", hint=c.hint,
                           message=f"keep_mask ran {g['keep_ops_100']} ops for 100 tokens and {g['keep_ops_300']} for "
                                   "300: its work grows with the tokens (a loop over tokens or choices?)")
    worst = max(g["moe_matmuls_40"], g["moe_matmuls_120"])
    if g["moe_matmuls_120"] > g["moe_matmuls_40"] or worst > 2 * E + 1:
        return CheckResult(c.name, False, value=worst, threshold=2 * E + 1, unit="matmuls per forward", hint=c.hint,
                           message=f"MoE.forward with {E} experts ran {g['moe_matmuls_40']} matmuls for 40 tokens and "
                                   f"{g['moe_matmuls_120']} for 120: at most {2 * E + 1} (each expert's w1 and w2 "
                                   "once, the router), the same for any number of tokens")
    ep, ep_err = every_rank(runs, "ep", "equiv")
    if ep_err:
        return error_result(c, ep_err, "matmuls per forward")
    res = runs["ep"].result
    per = res["experts"] // res["world"]
    counts = [r.get("matmuls") for r in ep]
    if None in counts:
        return CheckResult(c.name, False, unit="matmuls", hint=c.hint, message="the EP layer's experts have the wrong "
                           "shapes (ep_equivalence says which): nothing was counted")
    if max(counts) > 2 * per + 1:
        rank = counts.index(max(counts))
        return CheckResult(c.name, False, value=max(counts), threshold=2 * per + 1, unit="matmuls per forward",
                           hint=c.hint, message=f"rank {rank}'s expert_parallel forward ran {max(counts)} matmuls "
                                                f"for its {per} experts: at most {2 * per + 1}; run each local "
                                                "expert once on the rows of every rank together")
    return CheckResult(c.name, True, value=worst, threshold=2 * E + 1, unit="matmuls per forward", hint=c.hint,
                       message=f"keep_mask: {g['keep_ops_100']} ops at 100 and at 300 tokens; MoE.forward: {worst} "
                               f"matmuls for {E} experts at 40 and 120 tokens; EP: at most {max(counts)} per rank for "
                               f"{per} local experts")


@check("ep_balance", f"update_bias after each of {BALANCE['steps']} routings of fixed tokens by a skewed router: "
       f"max / mean tokens per expert <= {BALANCED} over the last 10 (routed and counted by the checker); without "
       "the updates the same router stays skewed",
       f"{WHERE}/ep_step.py update_bias: an overloaded expert's bias must fall, an idle one's rise, by gamma each "
       "step; the bias takes part in selection (route's bias), never in the weights.",
       runs={"units"}, crosscheck=True)
def ep_balance(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "units", "balance")
    if err:
        return error_result(c, err, "max / mean tokens")
    for e in rs[0]["exact"]:
        if e["got"] != e["want"]:
            return CheckResult(c.name, False, unit="bias", hint=c.hint,
                               message=f"update_bias from 0.25 with gamma 0.5 and counts {e['counts']} (mean "
                                       f"{sum(e['counts']) / len(e['counts']):g}): {e['got']}, expected {e['want']} "
                                       "(up by gamma below the mean, down above it, unchanged AT the mean; the mean "
                                       "in floating point)")
    on, off = rs[0]["on"], rs[0]["off"]
    ok = on["tail"] <= BALANCED
    msg = (f"{BALANCE['tokens']} tokens, top-{BALANCE['k']} of {BALANCE['experts']}: {on['first']:.2f} at the start; "
           f"after {BALANCE['steps']} updates {on['tail']:.2f} (worst of the last 10); without updates "
           f"{off['tail']:.2f}")
    return CheckResult(c.name, ok, value=on["tail"], threshold=BALANCED, unit="max / mean tokens per expert",
                       hint=c.hint, message=msg + ("" if ok else ": the bias does not balance the load (does an "
                                                   "overloaded expert's bias fall?)"))


@check("ep_equivalence", "expert_parallel on N = 2 or 3 ranks: each rank keeps its E/N experts (w1, w2 sliced in "
       "rank order) and its output rows and gradients (input, router, its experts' w1 and w2 from every rank's "
       f"tokens) equal the reference's (atol {TOL:g}), with choices dropped",
       f"{WHERE}/expert_parallel.py: rows must reach the rank of their expert and come back to the token they came "
       "from: sort by expert before sending, exchange the counts, swap the splits on the way back; the "
       "all-to-all's gradient is the all-to-all the other way.",
       runs={"ep"}, crosscheck=True)
def ep_equivalence(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "ep", "equiv")
    if err:
        return error_result(c, err, "max abs diff")
    res = runs["ep"].result
    n, per = res["world"], res["experts"] // res["world"]
    for rank, r in enumerate(rs):
        if "diffs" not in r:
            return CheckResult(c.name, False, unit="shape", hint=c.hint,
                               message=f"rank {rank} holds w1 {r['shapes']['w1']}, w2 {r['shapes']['w2']}: expected "
                                       f"its {per} of {res['experts']} experts, ({per}, h, f) and ({per}, f, h)")
        if r["sliced"] > 0:
            return CheckResult(c.name, False, unit="weights", hint=c.hint,
                               message=f"rank {rank}'s w1, w2 are not experts {rank * per}..{(rank + 1) * per - 1} of "
                                       "the layer it was given: rank r keeps experts r E/N .. (r+1) E/N - 1")
    worst = {}
    for rank, r in enumerate(rs):
        name, d = _worst(r["diffs"])
        if not d <= TOL:
            what = "output rows" if name == "output" else f"gradient of {name}"
            return CheckResult(c.name, False, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                               message=f"{n} ranks, {res['experts']} experts: rank {rank}'s {what} differ from the "
                                       f"reference by {d:.1e}")
        worst[rank] = d
    return CheckResult(c.name, True, value=max(worst.values()), threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"{n} ranks, {res['experts']} experts ({per} each), {res['tokens']} tokens a rank, "
                               f"{res['dropped']} of rank 0's choices dropped: outputs and gradients within "
                               f"{max(worst.values()):.1e}")


@check("a2a_bytes", "bytes each rank sends in expert_parallel, counted from its collectives: forward and "
       "backward each = the kept rows bound for other ranks + the rows it returns to them (4h B each), + at "
       "most E counts",
       f"{WHERE}/expert_parallel.py: send only kept choices (drop before dispatch), each row once per expert it "
       "chose, and only rows whose expert is elsewhere leave the rank; an all-gather of the tokens sends N times "
       "more.",
       runs={"ep"})
def a2a_bytes(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "ep", "equiv")
    if err:
        return error_result(c, err, "bytes sent per rank")
    results = runs["ep"].results
    problems, first = [], None
    for rank, (r, full) in enumerate(zip(rs, results)):
        if "fwd" not in r:
            return CheckResult(c.name, False, unit="bytes", hint=c.hint, message="the layer's experts have the wrong "
                               "shapes (ep_equivalence says which): nothing was measured")
        want = a2a_bytes_expected(full["rows_out"], full["rows_in"], full["hidden"])
        slack = 8 * full["experts"]  # the counts: E int64, some of which stay home
        for label, recs in (("forward", r["fwd"]), ("backward", r["bwd"])):
            got = sum(x[2] for x in recs)
            first = first if first is not None else got
            if not want <= got <= want + slack:
                ops = ", ".join(sorted({x[0] for x in recs})) or "nothing"
                more = got - want
                why = (" (more than the kept rows bound elsewhere: dropped choices sent, rows sent to their own rank "
                       "counted, or the tokens gathered?)" if more > 0 else " (fewer: some rows never left?)")
                problems.append(f"rank {rank} sent {got:,.0f} B in {label} ({ops}); expected {want:,.0f} B for "
                                f"{full['rows_out']} rows out + {full['rows_in']} back, {full['hidden']} fp32 wide"
                                + (f", + up to {slack} B of counts" if label == "forward" else "") + why)
    r0 = results[0]
    want0 = a2a_bytes_expected(r0["rows_out"], r0["rows_in"], r0["hidden"]) + 8 * r0["experts"]  # + the counts
    return CheckResult(c.name, not problems, value=first, threshold=want0, unit="bytes sent by rank 0, forward (max)",
                       hint=c.hint, message=problems[0] if problems else
                       f"{len(rs)} ranks: rank 0 sent {first:,.0f} B forward = {r0['rows_out']} rows out + "
                       f"{r0['rows_in']} back x {4 * r0['hidden']} B + counts; every rank's forward and backward as "
                       "its routing predicts")


@check("ep_dp_grads", "one ep_dp_step of the tiny GPT with MoE blocks on dp 2 x ep 2 ranks equals one process's "
       "step on the four ranks' batches: loss, every gradient and weight after the update (dense ones and this "
       f"rank's experts') and every selection bias (atol {TOL:g})",
       f"{WHERE}/ep_step.py: a dense weight is replicated on all ranks, an expert's only over dp (its .grad "
       "already sums its ep group's tokens); both divide by the world size; the loads that move the bias are "
       "counted over every rank.",
       runs={"epdp"}, crosscheck=True)
def ep_dp_grads(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "epdp", "step")
    if err:
        return error_result(c, err, "max abs diff")
    problems = [p for r in rs for p in r["problems"]]
    if problems:
        return CheckResult(c.name, False, unit="max abs diff", hint=c.hint, message=problems[0])
    for rank, r in enumerate(rs):
        for kind, label in (("grad", "gradient"), ("weight", "weight after the update"), ("bias", "selection bias")):
            if not r[kind] <= TOL:
                where = r["worst"].get(kind, "?")
                why = {"grad": " (an expert's gradient summed over the wrong ranks, or divided by dp, not the world? "
                               "If the reduction is right, the forward's gradient path differs: the aux loss, the "
                               "routing or the dispatch)" if where.endswith((".w1", ".w2")) else
                               " (a dense gradient is the mean over all ranks; if that is what you reduce, the "
                               "forward's gradient path differs: a detached aux loss, the routing or the dispatch)",
                       "bias": " (each layer's bias moves by exactly gamma toward the mean load, the loads summed over "
                               "every rank, after the step)"}.get(kind, "")
                return CheckResult(c.name, False, value=r[kind], threshold=TOL, unit="max abs diff", hint=c.hint,
                                   message=f"rank {rank}: {label} of {where} differs by {r[kind]:.1e}{why}")
    loss = max(abs(r["loss"] - r["want_loss"]) for r in rs)
    if not loss <= TOL:
        return CheckResult(c.name, False, value=loss, threshold=TOL, unit="loss", hint=c.hint,
                           message=f"the loss returned differs from the mean over all ranks by {loss:.1e} "
                                   f"({rs[0]['loss']:.5f} vs {rs[0]['want_loss']:.5f}): aux included, every rank")
    d = {k: max(r[k] for r in rs) for k in ("grad", "weight", "bias")}
    return CheckResult(c.name, True, value=max(d.values()), threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"{len(rs)} ranks (dp 2 x ep 2), vs one process on the four batches: loss "
                               f"{loss:.1e} ({rs[0]['want_loss']:.4f}), gradients {d['grad']:.1e}, weights "
                               f"{d['weight']:.1e}, biases {d['bias']:.1e}")


@check("ep_plan", "count_params splits the MoE GPT's parameters into dense and expert ones as the checker counts "
       "them; plan_experts picks the smallest ep dividing E and W that fits, with every candidate's bytes, at "
       "hidden (E, W, budget); its bytes at ep 2 equal the state the checker measures on each rank of the resume "
       "run (weights, gradients, AdamW moments)",
       f"{WHERE}/planner.py: a rank holds every dense weight and E/ep experts, 16 B per parameter held (fp32 "
       "weight, gradient, two moments); ep must divide E and W; the smallest ep that fits wins (fewer all-to-all "
       "hops); nothing fits: the largest, fits False.",
       runs={"units", "full"}, crosscheck=True)
def ep_plan(c: Check, runs) -> CheckResult:
    rs, err = every_rank(runs, "units", "plan")
    if err:
        return error_result(c, err, "bytes")
    p = rs[0]
    if p["count"] != p["want_count"]:
        return CheckResult(c.name, False, unit="parameters", hint=c.hint,
                           message=f"count_params of the tiny GPT with MoE blocks: (dense, expert) = "
                                   f"{tuple(p['count'])}, the checker counts {tuple(p['want_count'])} (every MoE "
                                   "layer's w1 and w2 are the experts; routers and the tied embedding, once, are "
                                   "dense)")
    for row in p["plans"]:
        if row["got"] != row["want"]:
            dense, expert, E, W, budget = row["case"]
            diff = [k for k in row["want"] if row["got"].get(k) != row["want"][k]]
            got = ", ".join(f"{k} {row['got'].get(k)}" for k in diff)
            want = ", ".join(f"{k} {row['want'][k]}" for k in diff)
            return CheckResult(c.name, False, unit="plan", hint=c.hint,
                               message=f"plan_experts(dense={dense:,}, expert={expert:,}, E={E}, W={W}, budget="
                                       f"{budget:,}): {got}; expected {want}")
    full = runs.get("full")
    measured = [r.get("state_bytes") for r in (full.results if full else [])]
    if err := first_error(runs, "full"):
        return error_result(c, err, "bytes")
    bad = [(rank, m) for rank, m in enumerate(measured) if m != p["at_ep2"]]
    if bad:
        rank, m = bad[0]
        return CheckResult(c.name, False, value=p["at_ep2"], threshold=m, unit="bytes per rank at ep 2", hint=c.hint,
                           message=f"your plan says {p['at_ep2']:,} B per rank at ep 2; rank {rank} of the 2-rank EP "
                                   f"run holds {m:,} B of weights, gradients and AdamW moments")
    return CheckResult(c.name, True, value=p["at_ep2"], threshold=measured[0], unit="bytes per rank at ep 2",
                       hint=c.hint, message=f"(dense, expert) = {tuple(p['count'])}; {len(p['plans'])} plans as the "
                                            f"rule picks; at ep 2 your {p['at_ep2']:,} B = the {measured[0]:,} B each "
                                            "rank of the resume run holds")


@check("ep_resume", "a 2-rank expert-parallel run (AdamW, bias balancing) saved by save_checkpoint after a hidden "
       "step S, then killed while its next checkpoint (step S+2) is half-written, and resumed by fresh processes "
       "whose model was built from another seed: back at step S, every tensor as saved, every later step's state "
       "bit-identical to the uninterrupted run's",
       f"{WHERE}/checkpoint.py: under expert parallelism each rank holds experts no other rank has, and each MoE "
       "layer's selection bias is a buffer, not a parameter; the optimizer's moments are state too. Each rank "
       "saves and loads its own, and a save killed halfway must leave the previous checkpoint whole.",
       symptoms=((TORN,
                  "The checkpoint on disk is half-written: the run was killed while writing it, and the file it "
                  "wrote in place is all a resume finds. Write to a temporary name in the same folder and rename "
                  "it over the checkpoint (os.replace) once complete: a kill then leaves the previous one "
                  "whole."),),
       runs={"full", "resume_1", "resume_2"})
def ep_resume(c: Check, runs) -> CheckResult:
    err = first_error(runs, "full", "resume_1", "resume_2")
    if err:
        return error_result(c, err, "steps")
    if not runs["resume_1"].killed_on_cue:
        return CheckResult(c.name, False, hint=c.hint, message="the run to be killed never reported its checkpoint "
                           "taken (save_checkpoint did not return on every rank)")
    full, r1, r2 = (runs[n].results for n in ("full", "resume_1", "resume_2"))
    saved_at, held = last_complete(r1)
    starts = sorted({r["start"] for r in r2})
    if msg := wrong_start(saved_at, held, starts):
        return CheckResult(c.name, False, value=starts[0], threshold=saved_at, unit="step", hint=c.hint, message=msg)
    steps = len(full[0]["digests"])
    for rank in range(len(full)):
        saved, loaded = full[rank].get("marked", {}), r2[rank].get("loaded", {})
        lost = [k for k in saved if loaded.get(k) != saved[k]]
        if lost:
            return CheckResult(c.name, False, value=len(lost), threshold=0, unit="tensors not restored", hint=c.hint,
                               message=f"right after load_checkpoint, rank {rank}'s {', '.join(lost[:3])}"
                                       f"{f' and {len(lost) - 3} more' if len(lost) > 3 else ''} differ from what "
                                       f"it held after step {saved_at} ({len(lost)} of its {len(saved)} tensors)")
    for rank in range(len(full)):
        want, got = full[rank]["digests"][saved_at:], r2[rank]["digests"]
        bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if bad is not None or len(got) != len(want):
            at = saved_at + 1 + (bad if bad is not None else min(len(got), len(want)))
            why = (" (the model was restored exactly: the optimizer's state was not?)" if at == saved_at + 1 else
                   " (later steps: state that only matters after a while, e.g. the optimizer's step count)")
            return CheckResult(c.name, False, value=at, unit="first step that differs", hint=c.hint,
                               message=f"saved after step {saved_at} of {steps}, killed, resumed: rank {rank}'s state "
                                       f"after step {at} differs from the uninterrupted run's{why}")
    how = (f"killed while writing step {saved_at + 2}'s checkpoint (half of {r1[0].get('held_path', '?')} written), "
           if held else "killed after its save (no torch.save call for the checker to hold), ")
    return CheckResult(c.name, True, value=steps - saved_at, threshold=steps - saved_at, unit="steps bit-identical",
                       hint=c.hint, message=f"{len(full)} ranks: {how}resumed from step {saved_at} into another "
                                            f"seed's model: every tensor as saved, every rank's state bit-identical "
                                            f"after each of steps {saved_at + 1}-{steps}")
