"""Lab 3's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): from the
runs' measurements to pass/fail. Formulas and thresholds are stated once, here."""
from __future__ import annotations

from checker.labs._common import Check, declare, diverged_at, error_result, every_rank, first_error
from checker.labs._held_save import last_complete
from checker.labs._windows import departs_at, loss_at, medians, mixed_moments, paired_ratio
from checker.labs.lab3 import FSDP_TOL, SAVE_AT, SGD_TOL, SPEED_SIZES, WHERE
from checker.relay import turn_rates
from checker.report import CheckResult

BYTES_TOL = 0.03        # measured bytes within 3% of the formula
RESHARD_TOL = 1e-4      # losses after resuming at another world size
THROUGHPUT_MIN = 0.25   # FSDP2 / DDP tokens/s, tiny on 2 CPU ranks (gloo), each in its own run taking turns, 2
                        # sequences per rank per step: the reference 0.30-0.50 with other grades on the 2 cores, one
                        # unit per layer with weights 0.19-0.20
ZERO2_MIN = 0.8         # Zero2Optimizer / DDP tokens/s: the same bytes as DDP's all-reduce; the reference
                        # measures 0.93-1.49 (each in its own run, taking turns, other grades on the 2 cores), one
                        # bucket per tensor 0.48
SLICE_TOL = 0.002       # bytes per rank vs 8Ψ/N, 4Ψ/N: padding is <= N-1 elements per bucket (tiny: 0.1%/100 buckets)
COMM_TOL = 0.01         # bytes sent per rank per step vs DDP's 2·4Ψ(N-1)/N; all-reduce + slice sends 1.5x

# Persistent model state per rank for DeepSpeed fp32, in bytes per parameter, N ranks:
# (weights, fp32 master partition, AdamW moments). Stages 1-2 keep a master copy of their partition.
DS_FORMULA = {0: lambda n: (4, 0, 8), 1: lambda n: (4, 4 / n, 8 / n), 2: lambda n: (4, 4 / n, 8 / n),
              3: lambda n: (4 / n, 4 / n, 8 / n)}

# On CUDA tensors gloo carries only all-reduce and broadcast: two ranks sharing one GPU over gloo reduce-scatter and
# all-gather through host memory (labs/common/staging.py, a teaching fallback), so every check runs there but the
# two speed ratios against DDP, which would time the fallback's copies (needs: NOT RUN, not failed).
CHECKS: list[Check] = []
check = declare(CHECKS)


# The correctness run's parts, in the order they run, and the check that grades each one's own code first
PARTS = {"zero1": "zero1_equivalence", "zero2": "zero2_equivalence", "fsdp": "fsdp_equivalence"}


def _parts(runs, name: str):
    """(every rank's result of one part of the correctness run, None) where it finished on every rank, even if a
    later part broke the run; else (None, the error to show). An error in an earlier part (a collective it left
    half done breaks every later one; an unwritten TODO, which raises before communicating, does not), or a crash
    whose last frame is in another part's file, is that part's, marked so that the check sends the learner there."""
    rs, err = every_rank(runs, "correctness", name)
    if rs is not None:
        return rs, None
    if err and err.get("type") == "Crash":  # no results at all: where the process died says whose code it was
        died_in = [other for other in PARTS if f"lab3_sharding/{other}.py" in err.get("message", "")]
        return None, {**err, "earlier": died_in[0]} if died_in and died_in[0] != name else err
    run = runs.get("correctness")
    for earlier in list(PARTS)[:list(PARTS).index(name)]:  # a TODO raises before any collective: it breaks nothing
        errs = [e for x in (run.results if run else []) if (e := x.get(f"{earlier}_error")) and not e.get("todo")]
        if errs:
            return None, {**min(errs, key=lambda e: e.get("t", 0)), "earlier": earlier}
    return None, err


def _part(runs, name: str):
    rs, err = _parts(runs, name)
    return (rs[0] if rs else None), err


def _error(c: Check, err: dict, unit: str = "") -> CheckResult:
    """error_result, or where an earlier part broke the run, that part's error under its own check's name."""
    if not err.get("earlier"):
        return error_result(c, err, unit=unit)
    first = PARTS[err["earlier"]]
    return CheckResult(c.name, False, unit=unit, cause="error",
                       message=f"not graded: the run broke in {err['earlier']}'s code, which {first} grades "
                               f"({err.get('type', 'Error')}: {err.get('message', '')[:300]}"
                               + (f" at {err['where']}" if err.get("where") else "") + ")",
                       hint=f"Fix what {first} reports first: the error is in that code, and this check's part of "
                            "the run shares its process group (or its process). Then grade again.")


# toy2's tensors (zero.toy2, worker side), each there for one clause of torch's optimizer contract
TOY2 = {"a": "31 float64 elements in a padded bucket",
        "b": "no gradient in step 3 on any rank: torch skips a parameter whose .grad is None (no momentum step, no "
             "decay), DDP leaves it None",
        "c": "handed over with add_param_group after construction: stepped from then on, by its owner"}


def _equivalence(c: Check, runs, part_name: str, what: str) -> CheckResult:
    r, err = _part(runs, part_name)
    if err:
        return _error(c, err, unit="max abs diff")
    if r.get("dtype_changed"):
        return CheckResult(c.name, False, unit="max abs diff", hint=c.hint,
                           message=f"building {what.split('(')[0]} changed the model's parameter dtypes "
                                   f"({'; '.join(r['dtype_changed'])}): a buffer the parameters become views of must "
                                   "have their dtype (a float64 or bfloat16 model silently turned float32)")
    unwaited = sorted({op for res in runs["correctness"].results for op in
                       (res.get(part_name) or {}).get("handles", {}).get("unwaited", [])})
    if unwaited:
        return CheckResult(c.name, False, unit="max abs diff", hint=c.hint,
                           message=f"step() returned with collectives still in flight ({', '.join(unwaited)} "
                                   "launched with async_op=True and never waited): the next forward may read weights "
                                   "another rank's slice has not reached yet. Wait on every handle before returning")
    g = r.get("groups")
    if g and g["local"] != g["outer"]:
        return CheckResult(c.name, False, value=g["local"], threshold=g["outer"], unit="local groups",
                           hint=f"Give the local optimizer one group per outer group, in the same order, even an empty "
                                f"one ({WHERE}/zero1.py) (checker hint lab3 zero1.ShardedOptimizer)",
                           message=f"ShardedOptimizer over tiny's {g['outer']} param groups (decayed weights; biases "
                                   f"and norms undecayed) built a local optimizer with {g['local']}: step() copies "
                                   "each outer group's hyperparameters (the scheduler's lr, weight_decay) onto the "
                                   "local group at the same position, so with another count some parameters step "
                                   "with another group's lr or decay")
    if not r.get("kwargs", True):
        return CheckResult(c.name, False, hint=c.hint, message=(
            f"step(probe=7) on {what.split('(')[0]} over a recording SGD: the wrapped optimizer's step never received "
            "the keyword arguments (it got none, or others). The contract: keyword arguments given to step() reach the "
            "local optimizer's step, as torch's optimizers take them (the weights themselves matched torch's within "
            f"{r['max_diff']:.1e})"))
    parts = ", ".join(f"{k} {v['max_diff']:.1e}" + ("" if v["in_sync"] else " (ranks differ)")
                      + (f" (worst: {v['worst']}, {TOY2[v['worst']]})" if k == "toy2" and v["max_diff"] > SGD_TOL
                         else "") for k, v in r["parts"].items())
    ok = r["max_diff"] <= SGD_TOL and r["in_sync"]
    msg = f"{what} vs torch DDP + SGD, 4 steps, max weight difference: {parts}" + (
        "" if r["in_sync"] else "; ranks hold different weights after the step")
    return CheckResult(c.name, ok, value=r["max_diff"], threshold=SGD_TOL, unit="max abs diff", hint=c.hint,
                       message=msg)


# Bytes per parameter (weights, grads, optimizer) before sharding; which of them each strategy divides by N
PRECISION = {"fp32": (4, 4, 0), "bf16": (2, 2, 4)}  # bf16: the fp32 master copy is optimizer state
OPTIMIZER = {"AdamW": 8, "SGD+momentum": 4, "SGD": 0}
SHARDED = {"DDP": (), "ZeRO-1": ("optimizer",), "ZeRO-2": ("optimizer", "grads"),
           "ZeRO-3 / FSDP": ("optimizer", "grads", "weights")}


@check("memory_model", "your bytes_per_rank (memory_model.py) gives the ZeRO paper's weights, grads, optimizer "
       "state and total per rank for DDP and ZeRO-1/2/3, fp32 and bf16 (fp32 master in the optimizer's share), "
       "AdamW, SGD with and without momentum, N = 1, 2, 8",
       f"Each ZeRO stage shards one more kind of state: which one first, which next, and what does each "
       f"precision keep per parameter? ({WHERE}/memory_model.py) (checker hint lab3 memory_model.bytes_per_rank)",
       runs={"correctness"})
def memory_model(c: Check, runs) -> CheckResult:
    rs = [r for r in (runs["correctness"].results if runs.get("correctness") else []) if r]
    mine = rs[0].get("memory_model") if rs else None
    if not mine:
        err = (rs[0].get("memory_model_error") if rs else None) or first_error(runs, "correctness") or {}
        return error_result(c, err)
    wrong = []
    for key, got in mine.items():
        strategy, precision, optimizer, n = key.split("|")
        w, g, extra = PRECISION[precision]
        whole = {"weights": w * 1000, "grads": g * 1000, "optimizer": (OPTIMIZER[optimizer] + extra) * 1000}
        want = {k: v / (int(n) if k in SHARDED[strategy] else 1) for k, v in whole.items()}
        want["total"] = sum(want.values())
        bad = [k for k in want if abs(got[k] - want[k]) > 1e-6 * max(1.0, want[k])]
        if bad:
            wrong.append(f"{strategy}, {precision}, {optimizer}, N = {n}: " + ", ".join(
                f"{k} {got[k] / 1000:g} B/param where {want[k] / 1000:g}" for k in bad))
    return CheckResult(c.name, not wrong, value=len(wrong), threshold=0, unit="cases wrong", hint=c.hint,
                       message=(f"{len(wrong)} of {len(mine)} cases differ from the paper's count; first: "
                                + "; ".join(wrong[:2])) if wrong else
                       f"all {len(mine)} cases (4 strategies x 2 precisions x 3 optimizers x N = 1, 2, 8) match")


@check("zero1_equivalence", "ShardedOptimizer(SGD) takes exactly the steps of torch DDP + SGD (4 steps, atol "
       "1e-6; also a float64 toy with a parameter unused in one step and a group added by add_param_group), "
       "ranks in sync",
       f"Only a parameter's owner can update it: does every rank end the step with every owner's new values, and "
       f"do the local groups follow the outer groups' learning rates? ({WHERE}/zero1.py) "
       "(checker hint lab3 zero1.step)",
       runs={"correctness"}, crosscheck=True)
def zero1_equivalence(c: Check, runs) -> CheckResult:
    return _equivalence(c, runs, "zero1", "ShardedOptimizer(SGD) on DDP's gradients")


@check("zero1_memory", "per-rank optimizer-state bytes within 3% of 8 B x the elements the partition deals the rank "
       "(~8Ψ/N); partition() on sizes whose largest comes last loads no rank more than the largest-first greedy, and "
       "on ties gives the contract's owners",
       f"An optimizer keeps state for every parameter it is handed: which parameters does this rank's local "
       f"optimizer see? ({WHERE}/zero1.py) (checker hint lab3 zero1.ShardedOptimizer)",
       runs={"correctness"})
def zero1_memory(c: Check, runs) -> CheckResult:
    results, err = _parts(runs, "zero1")
    if err:
        return _error(c, err, unit="x formula")
    ratios = []
    for row in results[0].get("partitions", []):
        if row["ok"] and not row.get("same", True):
            return CheckResult(c.name, False, hint=f"Equal sizes in their given order (a stable sort), a tie in load "
                                                   f"to the lowest rank ({WHERE}/zero1.py) (checker hint lab3 "
                                                   "zero1.partition)",
                               message=f"partition({row['sizes']}, {row['n']}) = {row['owners']}: as balanced as the "
                                       f"contract's {row['greedy_owners']} (loads {row['loads']}), but other owners. "
                                       "The contract fixes them (equal sizes in their given order, a tie in load to "
                                       "the lowest rank), so that any two implementations, and add_param_group, deal "
                                       "alike and a rank's saved optimizer shard loads into either")
        if not row["ok"]:
            return CheckResult(c.name, False, value=max(row["loads"]) / max(row["greedy"]), threshold=1.0,
                               unit="x greedy", hint="Deal the tensors largest first, each to the rank with the "
                                                     "fewest elements so far (labs/lab3_sharding/zero1.py) (checker "
                                                     "hint lab3 zero1.partition)",
                               message=f"partition({row['sizes']}, {row['n']}) loads the ranks with {row['loads']} "
                                       f"elements; dealt largest first, each to the least-loaded rank: "
                                       f"{row['greedy']}. A large tensor dealt late lands on an already loaded rank")
    for res in results:  # 8 B of AdamW moments per element the contract's partition deals the rank (~Ψ/N)
        ratios.append(res["state_bytes"] / (8 * res["dealt"]))
    worst = max(ratios, key=lambda x: abs(x - 1))
    return CheckResult(c.name, abs(worst - 1) <= BYTES_TOL, value=round(worst, 4), threshold=1 + BYTES_TOL,
                       unit="x formula", hint=c.hint,
                       message="optimizer state per rank / (8 B x the elements the partition deals it, ~Ψ/N): "
                               + ", ".join(f"rank {i} {r:.3f}"
                                                                               for i, r in enumerate(ratios)))


@check("zero2_equivalence", "Zero2Optimizer(SGD) takes the steps of torch DDP + SGD (4 steps from random "
       "weights, an LR schedule, 4-5 buckets; a 31-element tensor that needs padding; a float64 toy with a "
       "parameter unused in one step and a group added later), ranks in sync, dtypes kept, every handle "
       "step() launched waited before it returns",
       f"Does each rank's slice hold the mean (not the sum) of its gradient, does the step's update reach the "
       f"model's weights (views, not copies), and does every rank end with every updated slice? "
       f"({WHERE}/zero2.py) (checker hint lab3 zero2.launch_bucket)",
       symptoms=((r"Check failed: outputShape\[0\] \* worldSize == inputShape\[0\]",
                  "the reduce-scatter's output must be exactly 1/N of its input: every rank's slice [lo, hi) is P/N "
                  "elements of the padded bucket, the last rank's padding included "
                  f"({WHERE}/zero2.py) (checker hint lab3 zero2.FlatBucket)."),),
       runs={"correctness"}, crosscheck=True)
def zero2_equivalence(c: Check, runs) -> CheckResult:
    return _equivalence(c, runs, "zero2", "Zero2Optimizer(SGD)")


@check("zero2_memory", "per rank after a step: AdamW moments 8Ψ/N and gradients 4Ψ/N, each within 0.2% "
       "(the padding: at most N-1 elements per bucket, checked per flat buffer)",
       f"Something outlives the step at full size: a whole bucket's gradient kept alive by a slice or view of it, "
       f"or optimizer state beyond the owned slices ({WHERE}/zero2.py) (checker hint lab3 zero2.launch_bucket)",
       runs={"correctness"})
def zero2_memory(c: Check, runs) -> CheckResult:
    results, err = _parts(runs, "zero2")
    if err:
        return _error(c, err, unit="x formula")
    rows, worst = [], 1.0
    for rank, z in enumerate(results):
        n, psi = z["world_size"], z["psi"]
        m, g = z["moments"] / (8 * psi / n), z["grads"] / (4 * psi / n)
        worst = max(worst, m, g, key=lambda x: abs(x - 1))
        rows.append(f"rank {rank}: moments {z['moments']:,} B = {m:.4f} x 8Ψ/N, "
                    f"gradients {z['grads']:,} B = {g:.4f} x 4Ψ/N")
    pads = results[0].get("padding", [])
    if any(x >= n for x in pads):
        return CheckResult(c.name, False, value=round(worst, 4), threshold=1 + SLICE_TOL, unit="x formula",
                           hint="Round each bucket up to the least multiple of N, not the next one "
                                "(labs/lab3_sharding/zero2.py) (checker hint lab3 zero2.FlatBucket)",
                           message=f"flat buffers padded with {pads} zeros at N = {n} (tiny's buckets, then one "
                                   f"of {4 * n} elements, already a multiple of N): at most N - 1 each (the least "
                                   "multiple of N at least the bucket's size); a bucket "
                                   "already a multiple of N needs none. " + "; ".join(rows))
    return CheckResult(c.name, abs(worst - 1) <= SLICE_TOL, value=round(worst, 4), threshold=1 + SLICE_TOL,
                       unit="x formula", hint=c.hint, message="; ".join(rows))


@check("zero_comm_bytes", "bytes sent per rank, counted from the collectives: ZeRO-1's step within 1% of "
       "4Ψ(N-1)/N (each weight once from its owner, on top of DDP's all-reduce), ZeRO-2's whole step within 1% of "
       "DDP's all-reduce 2·4Ψ(N-1)/N (a reduce-scatter + an all-gather)",
       f"An all-reduce is a reduce-scatter followed by an all-gather: ZeRO-2 must send each half once per step. "
       f"Which half does each bucket's gradient need, which do the parameters, and is anything sent twice or "
       f"per tensor? ({WHERE}/zero2.py) (checker hint lab3 zero2.launch_bucket)",
       runs={"correctness"})
def zero_comm_bytes(c: Check, runs) -> CheckResult:
    z1, err = _part(runs, "zero1")
    if err:
        return _error(c, err, unit="x formula")
    n, psi = z1["world_size"], z1["psi"]
    once = 4 * psi * (n - 1) / n  # one copy of the weights' worth: a broadcast of each from its owner
    ratio1 = z1["sent"] / once
    if abs(ratio1 - 1) > COMM_TOL:
        ops = ", ".join(f"{op} {b:,.0f}" for op, b in z1["sent_by_op"].items()) or "nothing"
        return CheckResult(c.name, False, value=round(ratio1, 4), threshold=1 + COMM_TOL, unit="x 4Ψ(N-1)/N",
                           hint="Only the owner has a parameter's new value: which collective sends one rank's "
                                f"tensor to all the others, and at what cost per rank? ({WHERE}/zero1.py) (checker "
                                "hint lab3 zero1.step)",
                           message=f"ShardedOptimizer(AdamW).step() on tiny sent {z1['sent']:,.0f} B per rank in "
                                   f"{z1['calls']} calls ({ops}); one copy of the weights from their owners costs "
                                   f"4Ψ(N-1)/N = {once:,.0f} B per rank (a broadcast from each owner). "
                                   + ("An all-reduce of the weights sends twice that (2S(N-1)/N): every rank "
                                      "contributes a buffer only the owner's values matter in"
                                      if abs(ratio1 - 2) < COMM_TOL else "Each parameter's new value must go once "
                                      "from its owner to every other rank, and nothing more"))
    r, err = _part(runs, "zero2")
    if err:
        return _error(c, err, unit="x DDP")
    n, psi = r["world_size"], r["psi"]
    ddp = 2 * 4 * psi * (n - 1) / n
    ratio = r["sent"] / ddp
    ops = ", ".join(f"{op} {b:,.0f}" for op, b in r["sent_by_op"].items())
    f, _ = _part(runs, "fsdp")
    fsdp = (f"; FSDP2 (forward + backward) {f['structure']['sent'] / ddp:.2f}x (3x for the blocks, 2x for the root, "
            "which stays gathered from forward to backward)") if f else ""
    return CheckResult(c.name, abs(ratio - 1) <= COMM_TOL, value=round(ratio, 4), threshold=1 + COMM_TOL, unit="x DDP",
                       hint=c.hint, message=f"ZeRO-2: one step sent {r['sent']:,.0f} B per rank in {r['calls']} "
                                            f"calls ({ops}); DDP's all-reduce 2·4Ψ(N-1)/N = {ddp:,.0f}{fsdp}; ZeRO-1's "
                                            f"step {ratio1:.2f}x its 4Ψ(N-1)/N ({z1['sent']:,.0f} B, on top of DDP's)")


@check("fsdp_equivalence", "FSDP2 losses equal torch DDP's on the same data (4 steps, atol 1e-5)",
       f"Sharding must not change the computation: is every parameter (blocks and root) sharded exactly once, "
       f"and is the same model returned, unchanged? ({WHERE}/fsdp.py) (checker hint lab3 fsdp.apply_fsdp)",
       runs={"correctness"}, crosscheck=True)
def fsdp_equivalence(c: Check, runs) -> CheckResult:
    r, err = _part(runs, "fsdp")
    if err:
        return _error(c, err, unit="max abs diff")
    return CheckResult(c.name, r["loss_diff"] <= FSDP_TOL, value=r["loss_diff"], threshold=FSDP_TOL,
                       unit="max abs diff", hint=c.hint, message=f"4 steps, losses FSDP2 vs DDP differ by at most "
                                                                 f"{r['loss_diff']:.1e}")


@check("fsdp_memory", "local shards of params + grads + AdamW state within 3% of 16Ψ/N, and your "
       "model_state_bytes agrees with the checker's count",
       f"A parameter outside every sharded unit stays whole on every rank, and a sharded tensor occupies only its "
       f"local piece, whatever shape it reports ({WHERE}/fsdp.py) (checker hint lab3 fsdp.model_state_bytes)",
       runs={"correctness"})
def fsdp_memory(c: Check, runs) -> CheckResult:
    r, err = _part(runs, "fsdp")
    if err:
        return _error(c, err, unit="x formula")
    formula = 16 * r["psi"] / r["world_size"]
    ratio = r["checker_bytes"]["total"] / formula
    if abs(ratio - 1) > BYTES_TOL:
        return CheckResult(c.name, False, value=round(ratio, 4), threshold=1 + BYTES_TOL, unit="x formula",
                           hint=c.hint, message=f"local shards hold {r['checker_bytes']} bytes; 16Ψ/N = {formula:,.0f}")
    if r.get("learner_bytes_error"):
        return error_result(c, r["learner_bytes_error"], unit="x formula")
    mine = r["learner_bytes"] or {}
    if mine.get("total") != r["checker_bytes"]["total"]:
        return CheckResult(c.name, False, value=round(ratio, 4), threshold=1 + BYTES_TOL, unit="x formula", hint=c.hint,
                           message=f"sharding is right, but your model_state_bytes says {mine} and the local shards "
                                   f"hold {r['checker_bytes']}")
    return CheckResult(c.name, True, value=round(ratio, 4), threshold=1 + BYTES_TOL, unit="x formula", hint=c.hint,
                       message=f"{r['checker_bytes']['total']:,} bytes per rank = 16Ψ/N ({formula:,.0f}) + 4 B x "
                               f"{r['tensors']} AdamW step counters; your count agrees")


@check("fsdp_structure", "FSDP2 forward all-gathers one unit per block and the root (>= blocks + 1 calls) and "
       "never holds more unsharded than the root's parameters + one block; with mixed_precision=True every unit "
       "computes in bfloat16",
       f"Each sharded unit is gathered whole before its forward: what is the largest unit you made? The root "
       f"alone gathers the whole model at once: DDP's memory during forward, even though the bytes at rest look "
       f"sharded ({WHERE}/fsdp.py) (checker hint lab3 fsdp.apply_fsdp)",
       runs={"correctness"})
def fsdp_structure(c: Check, runs) -> CheckResult:
    r, err = _part(runs, "fsdp")
    if err:
        return _error(c, err, unit="B unsharded")
    s = r["structure"]
    limit = s["root_bytes"] + s["block_bytes"]
    if s.get("mp_error"):
        return error_result(c, {**s["mp_error"], "message": "apply_fsdp(model, mixed_precision=True): "
                                                            + s["mp_error"].get("message", "")}, unit="B unsharded")
    mp = dict(s.get("mp") or {})
    raised = mp.pop("forward", None)
    fp32 = [k for k, v in mp.items() if v != "bfloat16"]
    if fp32 or raised or not mp:
        return CheckResult(c.name, False, value=s["peak_unsharded"], threshold=limit, unit="B unsharded",
                           hint="Every unit gets the precision options apply_fsdp was given: each fully_shard call "
                                "takes the same keyword arguments (labs/lab3_sharding/fsdp.py) (checker hint lab3 "
                                "fsdp.apply_fsdp)",
                           message=f"apply_fsdp(model, mixed_precision=True), one forward: the weights inside each "
                                   f"unit's forward were {mp}" + (f" (then the forward {raised})" if raised else "")
                                   + f"; {', '.join(fp32) or 'no unit'} computed without the bfloat16 policy")
    ok = s["forward_all_gathers"] >= s["blocks"] + 1 and s["peak_unsharded"] <= limit
    return CheckResult(c.name, ok, value=s["peak_unsharded"], threshold=limit, unit="B unsharded", hint=c.hint,
                       message=f"one forward issued {s['forward_all_gathers']} all-gathers ({s['blocks']} blocks + the "
                               f"root need {s['blocks'] + 1}); at most {s['peak_unsharded']:,} B of parameters were "
                               f"unsharded at once (root {s['root_bytes']:,} + one block {s['block_bytes']:,} allowed)")


@check("deepspeed_stages", "DeepSpeed ZeRO 1-3 train with losses equal stage 0; persistent bytes per rank "
       "follow each stage's formula (incl. DeepSpeed's fp32 master partition)",
       f"DeepSpeed trains from its config: anything that changes the stage, the precision, accumulation or "
       f"AdamW's hyperparameters (or the parameter groups the engine gets) changes the losses or the bytes "
       f"({WHERE}/deepspeed_zero.py) (checker hint lab3 deepspeed_zero.ds_config)",
       runs={"deepspeed"}, crosscheck=True)
def deepspeed_stages(c: Check, runs) -> CheckResult:
    err = first_error(runs, "deepspeed")
    if err:
        return error_result(c, err)
    res = runs["deepspeed"].result
    for stage in range(4):
        if res.get(f"stage{stage}_error"):
            return error_result(c, {**res[f"stage{stage}_error"],
                                    "message": f"stage {stage}: {res[f'stage{stage}_error'].get('message', '')}"})
    base, notes, worst = res["stage0"]["losses"], [], 0.0
    if res.get("course_losses"):  # stage 0 is DeepSpeed's data parallelism: the course's AdamW step, exactly
        diff = max(abs(a - b) for a, b in zip(base, res["course_losses"]))
        if diff > FSDP_TOL:
            return CheckResult(c.name, False, hint=c.hint,
                               message=f"stage 0 losses differ from the course's own AdamW step (torch DDP, "
                                       f"labs.common.optim's betas and parameter groups) by {diff:.1e}: the "
                                       "config's optimizer is not the course's (betas, eps, weight decay, groups)")
    for stage in range(4):
        s = res[f"stage{stage}"]
        if s["stage_seen"] != stage:
            return CheckResult(c.name, False, hint=c.hint,
                               message=f"asked for stage {stage}, the engine runs {s['stage_seen']}")
        diff = max(abs(a - b) for a, b in zip(s["losses"], base))
        if diff > FSDP_TOL:
            return CheckResult(c.name, False, hint=c.hint,
                               message=f"stage {stage} losses differ from stage 0 by {diff:.1e}")
        w, m, o = DS_FORMULA[stage](s["world_size"])
        want, got = (w + m + o) * s["psi"], s["weights"] + s["master"] + s["moments"]
        worst = max(worst, abs(got / want - 1))
        notes.append(f"stage {stage}: {got / s['psi']:.2f} B/param (formula {w + m + o:g})")
    return CheckResult(c.name, worst <= BYTES_TOL, value=round(worst, 4), threshold=BYTES_TOL, unit="rel. diff",
                       hint=c.hint,
                       message="losses equal stage 0; persistent weights+master+moments: " + "; ".join(notes))


# What each piece of state lost on a resume does to the next steps (sharded_resume names the ones that differ)
LOST = {"model": "the weights are not the saved ones", "optimizer": "AdamW's moments are not the saved ones",
        "scheduler": "the LR schedule is not where it was (another learning rate from the first step on)",
        "sampler": "the sampler is not where it was (epoch, cursor): the resumed run draws other batches than the "
                   "saved run would have",
        "RNG": "this rank's random streams are not the ones it saved (other dropout masks): each rank restores its "
               "own RNG file",
        "RNG new": "a rank new since the save (the job grew) has no RNG file of its own, yet its streams changed in "
                   "the load: it took another rank's (rng-rank{rank % N}?), so two ranks draw the same dropout masks. "
                   "A new rank keeps its own seed"}


def _lost(saved: list[dict], loaded: list[dict], before: list[str]) -> list[str]:
    """Pieces of state that differ between the save and the load. A rank that existed at save time must have all of
    its own back, its RNG streams included; a rank new since the save (the job grew) the state every rank shares, and
    its own RNG streams as they were before the load (its seed: it has no RNG file, and another rank's would give two
    ranks the same dropout masks)."""
    lost = []
    for rank, b in enumerate(loaded):
        new = rank >= len(saved)
        a = {**saved[0], "RNG": before[rank]} if new else saved[rank]
        for k in a:
            if a.get(k) != b.get(k):
                lost.append((f"RNG new (rank {rank})" if new else f"RNG (rank {rank})") if k == "RNG" else k)
    return list(dict.fromkeys(lost))


def _unpublished(runs, saved_by: int) -> str | None:
    """What a kill at the wrong moment would have left: the first moment latest named no complete folder (after a
    rename or removal, _held_save.PublishWatch), or, after the kill, a folder under a final name (step-NNNNNN) that
    is not complete (DCP's .metadata, one RNG file per saving rank). None where neither happened."""
    for name in ("resume_1", "resume_ws1"):
        for r in (runs[name].results if runs.get(name) else []):
            u = r.get("unpublished")
            if u:
                state = "a folder without .metadata" if u["exists"] else "no folder at all"
                return (f"right after {u['op']} in save_sharded, latest named {u['latest']!r}: {state}. A kill "
                        "there leaves latest naming no checkpoint. Rename the complete folder into place first, then "
                        "point latest at it; a step whose folder is already complete (a second save of it) keeps "
                        "that folder, never moves it aside")
    folders = (runs["resume_2"].result or {}).get("folders") or {}
    for folder, files in folders.items():
        missing = [f for f in (".metadata", *(f"rng-rank{r}.pt" for r in range(saved_by))) if f not in files]
        if missing:
            why = ("the save wrote its shards straight under the final name, and the kill came before DCP's "
                   ".metadata: write under a temporary name, rename once complete" if ".metadata" in missing else
                   "the folder was renamed into place before every rank had written its part (the checker makes "
                   "the last rank write its own files late): rank 0 may rename only after every rank is done, "
                   "a barrier")
            return (f"after the kill, {folder} holds {', '.join(files) or 'nothing'}; missing "
                    f"{', '.join(missing)}. Every folder under a final name must be a complete checkpoint: {why}")
    return None


# A run of the resume check that raised: the hint follows the side it raised on (the save or the load)
SAVE_SYMPTOMS = (
    (r"FileNotFoundError|No such file or directory",
     "save_sharded raised, before any kill (the checker kills only inside the second save's DCP write): a path it "
     "used was gone when this rank got there. Either rank 0 renamed the temporary folder while another rank was "
     "still writing into it (every rank's part first, then the rename: a barrier; the checker makes the last rank "
     "write its own files late, so this shows every time), or a folder was renamed or removed that a later line "
     "still uses (renamed onto itself, removed after its rename) (checker hint lab3 dcp_state.save_sharded)."),
    (r"FileExistsError|Directory not empty|Is a directory|Not a directory",
     "save_sharded raised renaming a folder onto one that exists: a folder cannot replace a non-empty one. A step "
     "already complete under its final name keeps that folder (checker hint lab3 dcp_state.save_sharded)."),
)
LOAD_SYMPTOMS = (
    (r"No such file or directory: .*rng-rank\d+",
     "a rank found no RNG file of its own: the job grew since the save (the checker resumes a 2-rank checkpoint at "
     "4 ranks), and a new rank has none. Restore a rank's RNG only where its file exists; a new rank keeps its seed "
     "(checker hint lab3 dcp_state.load_sharded)."),
    (r"\.metadata|No such file or directory: .*step-\d+",
     "latest names a checkpoint folder the kill left incomplete: DCP writes each rank's shards, then .metadata "
     "last, and the kill landed in between. Write the folder under a temporary name, and only once every rank's "
     "part is in it rename it and then point latest at it: a kill then leaves latest on the previous, complete "
     "checkpoint (checker hint lab3 dcp_state.save_sharded)."),
)


def _resume_error(c: Check, runs, names) -> CheckResult | None:
    """The first run that raised, with the hint of the side it raised on: save_sharded, else the load."""
    import dataclasses

    err = first_error(runs, *names)
    if not err:
        return None
    seen = f"{err.get('where', '')}\n{err.get('traceback', '')}"
    side = SAVE_SYMPTOMS if "save_sharded" in seen and "load_sharded" not in seen else LOAD_SYMPTOMS
    return error_result(dataclasses.replace(c, symptoms=side), err)


@check("sharded_resume", f"FSDP2 + DCP: save at step {SAVE_AT}, 2 more steps, SIGKILL inside the next save (its "
       "shards written, its .metadata not; the last rank writes its own files late), resume from the last "
       "complete checkpoint at 2 ranks (each piece of state as saved, bit-identical), at 4 ranks (new ranks keep "
       "their seed) and at 1 (same losses within 1e-4); optimizer moments keyed by parameter name; latest "
       "replaced, never rewritten in place, and naming a complete folder after every rename or removal; every "
       "folder under a final name complete; a second save of a step keeps its folder",
       f"A resume needs all the state the next step reads, at any world size (sharded model and optimizer, "
       f"scheduler, sampler, step, each rank's RNG), and latest may only ever name a complete checkpoint "
       f"({WHERE}/dcp_state.py) (checker hint lab3 dcp_state.save_sharded)",
       runs={"full", "resume_1", "resume_2", "resume_grow", "resume_ws1"}, crosscheck=True)
def sharded_resume(c: Check, runs) -> CheckResult:
    # a run that raised gets the hint of the side it raised on, save or load (_resume_error: SAVE_SYMPTOMS,
    # LOAD_SYMPTOMS), not the declaration's
    names = ("full", "resume_1", "resume_2", "resume_grow", "resume_ws1")
    failed = _resume_error(c, runs, names)
    if failed:
        return failed
    full, r1, r2, g4, w1 = (runs[n].result for n in names)
    if not runs["resume_1"].killed_on_cue:
        return CheckResult(c.name, False, hint=c.hint, message="the first half never reported its checkpoint saved")
    unpublished = _unpublished(runs, r1["world_size"])
    if unpublished:
        return CheckResult(c.name, False, hint=c.hint, message=unpublished)
    saved_at, held = last_complete([r1])
    grown = f"{g4['world_size']} ranks, dropout off"
    for name, r in (("2 ranks", r2), (grown, g4), ("1 rank", w1)):
        if r["start"] != saved_at:
            return CheckResult(c.name, False, hint=c.hint, value=r["start"], threshold=saved_at, unit="step",
                               message=f"{name}: load_sharded returned step {r['start']}; the last complete "
                                       f"checkpoint is step {saved_at}" + (
                                           f" (the one of step {saved_at + 2} was killed before its .metadata)"
                                           if held else ""))
    saved = [x.get("saved_pieces") for x in runs["resume_1"].results]
    if r1.get("complete_at") == saved_at and all(saved):
        for name, run in (("2 ranks", "resume_2"), (grown, "resume_grow"), ("1 rank", "resume_ws1")):
            loaded = [x["loaded_pieces"] for x in runs[run].results]
            lost = _lost(saved, loaded, [x.get("rng_before_load") for x in runs[run].results])
            if lost:
                kept = [k for k in saved[0] if k not in {x.split(" ")[0] for x in lost}]
                return CheckResult(c.name, False, hint=c.hint,
                                   message=f"{name}: right after load_sharded, {', '.join(lost)} differ(s) from what "
                                           f"was saved at step {saved_at} ({', '.join(kept) or 'nothing'} match): "
                                           + "; ".join(dict.fromkeys(LOST[x.split(" (")[0]] for x in lost)))
    keys = r2.get("optim_keys") or {}
    if keys.get("unnamed"):
        return CheckResult(c.name, False, hint=c.hint,
                           message=f"the checkpoint keys the optimizer's moments by position, not by parameter name "
                                   f"(e.g. {', '.join(keys['unnamed'])}): a loading side that builds its model or "
                                   "groups in another order puts them on the wrong parameters. get_state_dict(model, "
                                   "optimizer) keys them by fully qualified name")
    inodes = w1.get("latest_inodes") or []
    if None not in inodes and any(a == b for a, b in zip(inodes, inodes[1:])):
        return CheckResult(c.name, False, hint=c.hint,
                           message="two saves in a row rewrote latest in place (the same file): a kill between its "
                                   "truncation and its write leaves latest empty, naming no checkpoint. Write it under "
                                   "a temporary name and os.replace it (ckpt.atomic_write_text)")
    resumed = r1["losses"][:saved_at] + r2["losses"]
    if resumed != full["losses"] or r2["digest"] != full["digest"]:
        where = diverged_at(resumed, full["losses"])
        first = resumed[saved_at:saved_at + 1] != full["losses"][saved_at:saved_at + 1]
        why = (": the first step after the resume already differs, with dropout on (each rank's masks come from its "
               "own RNG state: was every rank's restored, its own?)" if first else "")
        return CheckResult(c.name, False, hint=c.hint, message=f"2 ranks, dropout on: resumed run {where}{why}")
    diff = max((abs(float.fromhex(a) - float.fromhex(b)) for a, b in zip(w1["losses"], g4["losses"])), default=0.0)
    if not w1["losses"] or len(w1["losses"]) != len(g4["losses"]):
        return CheckResult(c.name, False, hint=c.hint, message=f"after resuming, 1 rank trained {len(w1['losses'])} "
                                                               f"steps and {grown} {len(g4['losses'])}")
    return CheckResult(c.name, diff <= RESHARD_TOL, value=diff, threshold=RESHARD_TOL, unit="max loss diff",
                       hint=c.hint,
                       message=f"saved by 2 ranks at step {saved_at} (dropout on), " + (
                           f"killed inside step {saved_at + 2}'s save (shards in {r1.get('held_path', '?')}, no "
                           ".metadata)" if held else "killed after the next save (no DCP write for the checker to "
                           "hold)") + "; resumed by 2 ranks: bit-identical, each piece of state as saved; dropout off, "
                                      f"resumed by 1 rank vs {g4['world_size']}: losses within {diff:.1e}")


def speed_pairs(runs):
    """({strategy: [(its tokens/s, DDP's), ...]}, None): each of the learner's windows in the speed runs' turns with
    the DDP window of its size in its round, run back to back with it (checker/relay.py, plan.py); or (None, the error
    to show)."""
    err = first_error(runs, "speed", "speed_ddp")
    if err:
        return None, err
    mine, ddp = runs["speed"].result.get("speed"), runs["speed_ddp"].result.get("speed")
    if not mine or not ddp:
        return None, {"type": "Crash", "message": "a speed run reported no windows"}
    turns, why = turn_rates(runs["speed"].relay, {"speed": 1.0, "speed_ddp": 1.0})  # 1 / each window's seconds
    if why:
        return None, {"type": "Untimed", "message": why}
    rate = {side: [r["work"][size] * t for (_, size), t in zip(r["windows"], turns[run])]
            for side, r, run in (("mine", mine, "speed"), ("ddp", ddp, "speed_ddp"))}
    pairs: dict = {}
    for j, (name, size) in enumerate(mine["windows"]):
        k = j // 2  # its round: two windows of each side
        d = next(rate["ddp"][i] for i in (2 * k, 2 * k + 1) if ddp["windows"][i][1] == size)
        pairs.setdefault(name, []).append((rate["mine"][j], d))
    return pairs, None


# The timed steps' losses against DDP's twin (same weights, batches, AdamW): the reference's FSDP2 and ZeRO-2 differ
# from DDP only by the rounding of another reduction order; a step that skips its work while timed is off at once.
SPEED_LOSS_RTOL = 1e-3


def _timed_losses(runs, strategy: str) -> tuple[str | None, float]:
    """(why the learner's timed `strategy` steps did not train as DDP's twin at that size did, or None; the largest
    relative difference of their losses)."""
    worst = 0.0
    for rank, (mine, ddp) in enumerate(zip(runs["speed"].results, runs["speed_ddp"].results)):
        a = mine.get("speed", {}).get("losses", {}).get(strategy, [])
        b = ddp.get("speed", {}).get("losses", {}).get(f"ddp_{strategy}", [])
        if len(a) < len(b) or not b:
            return f"rank {rank} ran {len(a)} timed {strategy} steps where DDP ran {len(b)}", worst
        k = departs_at(a[:len(b)], b, SPEED_LOSS_RTOL)  # a strategy that took the other's windows ran more steps
        if k is not None:
            return (f"the timed steps did not train as DDP's: rank {rank}, step {k + 1} of the speed run, loss "
                    f"{loss_at(a, k)} vs DDP's {loss_at(b, k)} (same weights, batches and AdamW): a step timed for "
                    "speed must do the whole step"), worst
        worst = max([worst, *(abs(x - y) / abs(y) for x, y in zip(a, b))])
    return None, worst


def _speed_ratio(c: Check, runs, strategy: str, minimum: float, what: str, tail: str = "") -> CheckResult:
    """The median over the rounds' window pairs of the learner's `strategy` tokens/s over torch DDP's, each pair run
    back to back, each side in a process group of its own (plan.py, checker/relay.py)."""
    run = runs.get("speed")
    errs = [e for x in (run.results if run else []) if (e := x.get(f"{strategy}_error"))]
    pairs, err = (None, min(errs, key=lambda e: e.get("t", 0))) if errs else speed_pairs(runs)
    if err:
        return error_result(c, err, unit="x DDP")
    rates = {strategy: [m for m, _ in pairs[strategy]], "ddp": [d for _, d in pairs[strategy]]}
    ratio, t = paired_ratio(rates, strategy, "ddp"), medians(rates)
    why, worst = _timed_losses(runs, strategy)
    if why:
        return CheckResult(c.name, False, value=round(ratio, 3), threshold=minimum, unit="x DDP", hint=c.hint,
                           message=why)
    tail = tail if ratio >= minimum else ""
    n, steps = SPEED_SIZES[strategy]
    return CheckResult(c.name, ratio >= minimum, value=round(ratio, 3), threshold=minimum, unit="x DDP", hint=c.hint,
                       message=f"{what} {t[strategy]:,.0f} vs DDP {t['ddp']:,.0f} tokens/s (2 ranks, {n} sequences "
                               f"per rank per step; median of the ratios of {len(rates['ddp'])} window pairs, each "
                               f"side in a process group of its own, taking turns; the timed steps' losses within "
                               f"{worst:.1e} of DDP's)" + tail
                               + mixed_moments(ratio, t[strategy], t["ddp"]))


@check("throughput", "FSDP2 tokens/s >= 0.25x torch DDP's, each in a process group of its own taking turns timed by "
       "the checker (the price of ZeRO-3 on gloo)",
       f"Every sharded unit costs an all-gather in forward, another in backward and a reduce-scatter: how many "
       f"units did you make, and how small? ({WHERE}/fsdp.py) (checker hint lab3 fsdp.apply_fsdp)",
       needs=("unstaged_collectives",),
       runs={"correctness", "speed", "speed_ddp"})
def throughput(c: Check, runs) -> CheckResult:
    _, err = _part(runs, "fsdp")  # FSDP2 is timed only where its own part ran
    if err:
        return _error(c, err, unit="x DDP")
    return _speed_ratio(c, runs, "fsdp", THROUGHPUT_MIN, "FSDP2", ": the all-gathers and reduce-scatters are the price")


@check("zero2_throughput", "Zero2Optimizer launches its collectives inside backward and waits on none there "
       "(the order of events, not a clock), and its tokens/s >= 0.8x torch DDP's (median of window pairs, each in "
       "a process group of its own taking turns timed by the checker): the same bytes as DDP's all-reduce, so about "
       "as fast (0.8 leaves room for a busy machine)",
       f"The same bytes as DDP should cost about DDP's time: does each bucket's communication run while backward "
       f"goes on, or does something wait for it there, and do buckets travel whole? ({WHERE}/zero2.py) "
       f"(checker hint lab3 zero2.launch_bucket)",
       needs=("unstaged_collectives",),
       runs={"correctness", "speed", "speed_ddp"})
def zero2_throughput(c: Check, runs) -> CheckResult:
    zs, err = _parts(runs, "zero2")  # what blocked it: your Zero2Optimizer first, then the timed windows
    if err:
        return _error(c, err, unit="x DDP")
    for rank, z in enumerate(zs):  # overlap, read from the order of events: no clock, no luck
        bw = z["handles"]["backward"]
        if not bw["launched"] or bw["blocked"]:
            why = (f"{len(bw['blocked'])} of the {len(bw['launched'])} collectives launched inside backward were "
                   f"waited on (or synchronous) before backward returned ({', '.join(sorted(set(bw['blocked'])))}): "
                   "backward stalls on each bucket instead of computing the next one while it travels. Start each "
                   "with async_op=True, keep the handle, wait in step()" if bw["launched"] else
                   "no collective was launched during backward: the gradients all travel after it, so none overlaps it")
            return CheckResult(c.name, False, threshold=ZERO2_MIN, unit="x DDP", hint=c.hint,
                               message=f"rank {rank}, one AdamW step: {why}")
    return _speed_ratio(c, runs, "zero2", ZERO2_MIN, "Zero2Optimizer",
                        "; every bucket's collective launched in backward, none waited there")
