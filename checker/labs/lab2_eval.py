"""Lab 2: from the runs' measurements to pass/fail. Thresholds are stated once, here."""
from __future__ import annotations

from checker.labs._common import Check, diverged_at, error_result, first_error, part, run_info
from checker.labs._held_save import last_complete, wrong_start
from checker.labs._windows import checked_rates, medians, paired_ratio
from checker.labs.lab2 import N_STEPS, RUNS, SAVE_AT, TOL, WORLD_SIZE
from checker.report import CheckResult

# BucketedDDP / torch DDP tokens/s, the median of interleaved window ratios. The reference measures 0.93-1.09 on
# 2 idle cores and 0.94-0.96 beside two busy loops; one bucket per tensor (mutant bucket_per_tensor) 0.44-0.53
# and 0.65-0.69. 0.8 sits between, with room on both sides; torch's C++ reducer is a little ahead of Python hooks.
THROUGHPUT_MIN = 0.8
OVERLAP_MIN = 0.5       # fraction of the all-reduced bytes whose all-reduce started before backward returned
HIDDEN_MIN = 0.05       # fraction of all-reduce time hidden behind backward: reference 0.25-0.5 on 2 busy cores,
                        # naive 0, launched from the hook but waited for there ~0.01 (the geometric middle: 0.05)


def sharding(c: Check, runs) -> CheckResult:
    problems = []
    for w in ("w2", "w3"):
        r, err = part(runs, "sharding", w)
        if err:
            return error_result(c, err)
        world = w[1]
        if r["seen"] != r["unique"]:
            problems.append(f"world {world}: {r['seen'] - r['unique']} windows read twice in one epoch")
        if r["unique"] != r["expected"]:
            problems.append(f"world {world}: {r['unique']} distinct windows per epoch, expected {r['expected']}")
        for key, what in (("sizes_ok", "a batch is not batch_size long"), ("reshuffled", "epoch 1 repeats epoch 0"),
                          ("set_epoch", "set_epoch(0) does not restart epoch 0"),
                          ("resumes", "a sampler loaded from state_dict() reads other ids")):
            if not r[key]:
                problems.append(f"world {world}: {what}")
        theirs, ref_err = part(runs, "sharding_ref", w)
        if ref_err:
            return error_result(c, ref_err)
        vs = _first_other_ids(r["ids"], theirs["ids"], r["tail"])
        if vs and not problems:
            problems.append(f"world {world}, rank {vs['rank']}, step {vs['step']} (100 windows: each epoch ends with "
                            f"{vs['tail']} left over): yours {vs['yours']} vs reference {vs['reference']}; rank r's "
                            "ids are the r-th block of BatchSampler's global batch")
    return CheckResult(c.name, not problems, hint=c.hint,
                       message="; ".join(problems) or "world sizes 2 and 3: disjoint, complete, reshuffled, resumable")


def bucket_layout(c: Check, runs) -> CheckResult:
    rows, err = part(runs, "sharding", "layout")
    if err:
        return error_result(c, err, unit="cases")
    for n, r in enumerate(rows):
        if sorted(map(tuple, r["yours"])) != sorted(map(tuple, r["want"])):
            mine, want = r["yours"], r["want"]
            first = next((k for k, (a, b) in enumerate(zip(mine, want)) if a != b), min(len(mine), len(want)))
            return CheckResult(c.name, False, value=n, threshold=len(rows), unit="cases", hint=c.hint,
                               message=f"{r['case']}: {len(mine)} buckets, the layout's {len(want)}; bucket {first}: "
                                       f"yours holds parameters {_at(mine, first)}, the layout {_at(want, first)} "
                                       "(parameter i is the i-th of model.parameters())")
    return CheckResult(c.name, True, value=len(rows), threshold=len(rows), unit="cases", hint=c.hint,
                       message="; ".join(f"{r['case']}: {len(r['want'])} buckets" for r in rows) + ", as laid out")


def _at(buckets: list, k: int) -> str:
    return str(buckets[k]) if k < len(buckets) else "none"


def _first_other_ids(mine: list, ref: list, tail: int) -> dict | None:
    """The first (rank, step) whose ids differ from the reference's run's."""
    for rank, (a, t) in enumerate(zip(mine, ref)):
        for step, (x, y) in enumerate(zip(a, t)):
            if x != y:
                return {"rank": rank, "step": step + 1, "yours": x, "reference": y, "tail": tail}
    return None


def grad_equivalence(c: Check, runs) -> CheckResult:
    worst, notes = 0.0, []
    for name in ("naive", "bucketed", "bucketed_tail"):
        r, err = part(runs, "correctness", name)
        if err:
            return error_result(c, {**err, "message": f"{name}: {err.get('message', '')}"}, unit="max abs diff")
        d = max(max(r["grad_diff"]), max(r["param_diff"]))
        worst = max(worst, d)
        notes.append(f"{name.replace('_tail', ' (0.1 MB buckets)')} {d:.1e}")
        if d <= TOL and r.get("copied"):  # the values are right, but not where the contract puts them
            return CheckResult(c.name, False, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                               message=f"{name}: gradients right, but after finish_gradient_synchronization "
                                       f"{r['copied']} parameters' .grad lie outside their bucket's reduced buffer: "
                                       "the averaged bytes were copied, not viewed. Each .grad must be a view of its "
                                       "slice of the bucket's buffer (no copy, no extra bytes)")
    return CheckResult(c.name, worst <= TOL, value=worst, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message="vs one process on the global batch, 3 steps: " + ", ".join(notes))


def ranks_in_sync(c: Check, runs) -> CheckResult:
    for name in ("naive", "bucketed"):
        r, err = part(runs, "correctness", name)
        if err:
            return error_result(c, err)
        if not all(r["in_sync"]):
            step = r["in_sync"].index(False) + 1
            return CheckResult(c.name, False, hint=c.hint,
                               message=f"{name}: ranks hold different weights after step {step}")
    return CheckResult(c.name, True, hint=c.hint, message="naive and bucketed: identical weights on both ranks "
                                                          "after every step")


def no_sync_accumulation(c: Check, runs) -> CheckResult:
    r, err = part(runs, "correctness", "no_sync")
    if err:
        return error_result(c, err, unit="max abs diff")
    early, last = r["calls"][:-1], r["calls"][-1]
    if any(early) or last == 0:
        return CheckResult(c.name, False, hint=c.hint,
                           message=f"all-reduces per micro-step {r['calls']}: expected none inside no_sync() "
                                   "and at least one on the last micro-step")
    d = r["grad_diff"]
    return CheckResult(c.name, d <= TOL, value=d, threshold=TOL, unit="max abs diff", hint=c.hint,
                       message=f"all-reduces per micro-step {r['calls']}; gradient vs one batch of 3x the size: "
                               f"{d:.1e}")


def step_matches_reference(c: Check, runs) -> CheckResult:
    from checker.labs._differential import first_difference
    from checker.labs.lab2 import STEP_PLAN

    err = first_error(runs, "step", "step_ref")
    if err:
        return error_result(c, err, unit="steps")
    n = len(STEP_PLAN)
    for rank, (mine, ref) in enumerate(zip(runs["step"].results, runs["step_ref"].results)):
        wrong = first_difference({"learner": mine["learner"], **ref})
        if wrong is not None:
            step, what, measured, fix = wrong
            k, scale = STEP_PLAN[step - 1]
            return CheckResult(c.name, False, value=step - 1, threshold=n, unit="steps", hint=f"{fix}. {c.hint}",
                               message=f"rank {rank}, step {step} ({k} micro-batches"
                                       f"{', forced over the clip threshold' if scale != 1 else ''}): {what}: "
                                       f"{measured}")
    return CheckResult(c.name, True, value=n, threshold=n, unit="steps", hint=c.hint,
                       message=f"every rank, {n} steps of {', '.join(str(k) for k, _ in STEP_PLAN)} micro-batches (one "
                               "clipped) equal the reference's: loss, all-reduces, lr, grad norms, .grad, weights")


def overlap(c: Check, runs) -> CheckResult:
    r, err = part(runs, "correctness", "bucketed")
    if err:
        return error_result(c, err, unit="of all-reduces")
    # by bytes, not calls: a token all-reduce fired from a hook must not stand in for the gradients
    early, total = sum(r["bytes_in_backward"]), sum(r["bytes"])
    frac = early / total if total else 0.0
    # and by time: launched during backward is not enough if backward then waits for it (all ranks, all steps)
    hidden = overlap_fractions(runs).get("bucketed", {}).get("fraction", 0.0)
    naive, _ = part(runs, "correctness", "naive")
    ref = f"; naive: {sum(naive['bytes_in_backward']) / max(1, sum(naive['bytes'])):.0%}" if naive else ""
    msg = (f"{frac:.0%} of the all-reduced bytes ({sum(r['calls'])} calls) started before backward returned{ref}; "
           f"{hidden:.0%} of the all-reduce time was hidden behind backward")
    if frac >= OVERLAP_MIN and hidden < HIDDEN_MIN:
        msg += " — launched early, but backward waited for them (a wait, or a blocking all-reduce, inside the hook)"
        # the measured column shows the criterion that failed: the time hidden, not the bytes launched
        return CheckResult(c.name, False, value=round(hidden, 3), threshold=HIDDEN_MIN, unit="of time hidden",
                           hint=c.hint, message=msg)
    return CheckResult(c.name, frac >= OVERLAP_MIN and hidden >= HIDDEN_MIN, value=round(frac, 3),
                       threshold=OVERLAP_MIN, unit="of bytes", hint=c.hint, message=msg)


def throughput(c: Check, runs) -> CheckResult:
    err = first_error(runs, "throughput")
    if not err:
        rates, err = checked_rates(runs["throughput"], runs["throughput"].result["windows"])
        err = err or runs["throughput"].result.get("torch_ddp_error")  # your make_torch_ddp, built once, not timed
    if err:
        return error_result(c, err, unit="x torch DDP")
    # the graded figure is the median of the per-pair ratios (each pair: adjacent windows, same load); the
    # message leads with that same statistic, then the medians of each wrapper's windows for scale
    ratio, t = paired_ratio(rates, "bucketed", "torch"), medians(rates)
    if why := _torch_ddp_wrong(runs["throughput"].result):
        return CheckResult(c.name, False, value=round(ratio, 3), threshold=THROUGHPUT_MIN, unit="x torch DDP",
                           hint=c.hint, message=why)
    return CheckResult(c.name, ratio >= THROUGHPUT_MIN, value=round(ratio, 3), threshold=THROUGHPUT_MIN,
                       unit="x torch DDP", hint=c.hint,
                       message=f"bucketed / torch DDP {ratio:.2f}x (median of the ratios of interleaved window "
                               f"pairs); median tokens/s: bucketed {t['bucketed']:,.0f}, torch DDP {t['torch']:,.0f}"
                               + (f", naive {t['naive']:,.0f}" if "naive" in t else "") + " (2 ranks)")


def _torch_ddp_wrong(r: dict) -> str | None:
    """What is wrong with the learner's make_torch_ddp (lab 5 trains with it), or None."""
    d = r["torch_ddp"]
    if d["cap"] != d["want_cap"]:
        got = f"{d['cap']:,} B buckets" if isinstance(d["cap"], int) else f"a {d['type']} with no bucket_bytes_cap"
        return (f"make_torch_ddp(..., bucket_cap_mb={d['asked_mb']}) built {got}, not {d['want_cap']:,} B: "
                "the bucket size it is given is not what the wrapper uses")
    if d["device_ids"] != d["want_device_ids"]:
        return (f"make_torch_ddp built a wrapper bound to devices {d['device_ids']}, not {d['want_device_ids']}: one "
                "GPU per rank, this rank's, or no device on CPU")
    return None


def _resumed(full, r1, r2, after: bool) -> tuple[str | None, str, int | None]:
    """(what went wrong or None, how the kill landed, the step the resume returned) for one killed run and its
    resume, against the uninterrupted one."""
    saved_at, held = last_complete(r1)
    holder = next((r for r in r1 if r.get("held")), {})
    what = "the first write after the weights' file" if after else "the weights"
    how = (f"killed while rank {holder.get('rank', '?')} wrote step {saved_at + 2}'s checkpoint, {what} (half of "
           f"{holder.get('held_path', '?')} written)" if held else "killed after the save")
    starts = sorted({r["start"] for r in r2})
    if msg := wrong_start(saved_at, held, starts):
        return f"{how}: {msg}", how, starts[0]
    for rank in range(len(full)):
        resumed = r1[rank]["losses"][:saved_at] + r2[rank]["losses"]
        if resumed != full[rank]["losses"] or r2[rank]["digest"] != full[rank]["digest"]:
            return (f"{how}, resumed from step {saved_at}: rank {rank}'s run "
                    f"{diverged_at(resumed, full[rank]['losses'])}"), how, None
    return None, how, None


def resume_exact(c: Check, runs) -> CheckResult:
    err = first_error(runs, "full", "resume_1", "resume_2", "after_1")
    if err:
        return error_result(c, err)
    if not (runs["resume_1"].killed_on_cue and runs["after_1"].killed_on_cue):
        return CheckResult(c.name, False, hint=c.hint, message="the first half never reported its checkpoint saved")
    full, saved_1 = runs["full"].results, last_complete(runs["resume_1"].results)[0]
    wrong, how, start = _resumed(full, runs["resume_1"].results, runs["resume_2"].results, after=False)
    if wrong:
        return CheckResult(c.name, False, value=start, threshold=saved_1 if start is not None else None,
                           unit="step" if start is not None else "", hint=c.hint, message=wrong)
    # the other kill point: the weights' file complete, the kill inside a later write of the same save
    r1 = runs["after_1"].results
    saved_at, held = last_complete(r1)
    err = first_error(runs, "after_2")
    wrong_after, how_after, _ = (None, "", None) if err else _resumed(full, r1, runs["after_2"].results, after=True)
    if err or wrong_after:
        what = (f"the resume failed: {err.get('type', 'Error')}: {err.get('message', '')}" if err else wrong_after)
        path = next((r.get("held_path") for r in r1 if r.get("held")), "?")
        return CheckResult(c.name, False, hint=c.hint,
                           message=f"a second run was killed after rank 0 had written step {saved_at + 2}'s weights, "
                                   f"inside the next file that save wrote{f' ({path})' if held else ''}; {what}. A "
                                   "kill at any point of a save must leave a checkpoint whose every file exists: the "
                                   "file naming the step is written last")
    n = len(full[0]["losses"])
    return CheckResult(c.name, True, value=n, threshold=n, unit="identical steps", hint=c.hint,
                       message=f"{len(full)} ranks: {how}, resumed from step {saved_1}: steps {saved_1 + 1}-{n} and "
                               f"final weights bit-identical; a second run {how_after}"
                               + ("" if held else " (no write after the weights' file)") + ", "
                               + f"resumed from step {saved_at}: the same")


EVALUATORS = {f.__name__: f for f in (sharding, bucket_layout, grad_equivalence, ranks_in_sync, no_sync_accumulation,
                                      step_matches_reference, overlap,
                                      throughput, resume_exact)}


def overlap_fractions(runs) -> dict:
    """{wrapper: communication time hidden behind backward / all communication time}, over every rank and
    step of the correctness run (the checker's CollectiveRecorder: launch, completion, host waits)."""
    run, out = runs.get("correctness"), {}
    for name in ("naive", "bucketed"):
        parts = [r.get(name) for r in (run.results if run else [])]
        if parts and all(isinstance(x, dict) and x.get("comm_s") for x in parts):
            total = sum(sum(x["comm_s"]) for x in parts)
            out[name] = {"fraction": sum(sum(x["hidden_s"]) for x in parts) / total if total else 0.0,
                         "exposed_ms": 1e3 * max(sum(x["exposed_s"]) / len(x["exposed_s"]) for x in parts)}
    return out


def info(runs) -> list[tuple[str, str]]:
    rows, frac = [], overlap_fractions(runs)
    if frac:
        rows.append(("communication overlap (all-reduce time hidden behind backward / all all-reduce time)",
                     ", ".join(f"{k} {v['fraction']:.0%}" for k, v in frac.items())))
        rows.append(("exposed communication per step (backward end -> gradients averaged, slowest rank)",
                     ", ".join(f"{k} {v['exposed_ms']:.1f} ms" for k, v in frac.items())))
    t = runs.get("throughput")
    if t and t.results and all("cpu_util" in r for r in t.results):
        rows.append(("CPU utilisation per rank (throughput run)",
                     ", ".join(f"rank {i} {r['cpu_util']:.0%}" for i, r in enumerate(t.results))))
    return rows + run_info(runs)


def grade(h, checks):
    need = set().union(*(RUNS[c.name] for c in checks))
    # the second killed run's checkpoint in a folder of its own: a save that removes files by a pattern removes none
    # of the first's
    (h.workdir / "after").mkdir(exist_ok=True)
    ckpt, ckpt_after = str(h.workdir / "ckpt.pt"), str(h.workdir / "after" / "ckpt.pt")
    v = h.variant  # hidden variants: other seeds, data order, kill step; odd ones check the wrappers on 3 ranks
    seed, save_at, ranks = 7 + v, SAVE_AT + v % 5, 3 if v % 2 else WORLD_SIZE
    common = dict(steps=N_STEPS, data_seed=v)
    phases = [
        [dict(name="correctness", task="correctness", nproc=ranks, budget_s=90),
         dict(name="sharding", task="sharding", budget_s=60),
         # the reference in runs of its own, which never import the learner's code (checker/reach.py)
         dict(name="sharding_ref", task="sharding_ref", target="solutions", budget_s=60)],
        [dict(name="full", task="train", nproc=2, budget_s=90, args=dict(seed=seed, **common)),
         dict(name="resume_1", task="train", nproc=2, budget_s=90, kill_on="saved",
              args=dict(seed=seed, save_at=save_at, ckpt=ckpt, **common)),
         # the other kill point: the weights' file complete, the kill inside the next write
         dict(name="after_1", task="train", nproc=2, budget_s=90, kill_on="saved_after",
              args=dict(seed=seed, save_at=save_at, ckpt=ckpt_after, after_weights=True, **common))],
        [dict(name="resume_2", task="train", nproc=2, budget_s=90,
              args=dict(seed=seed + 777, resume=True, ckpt=ckpt, **common)),
         dict(name="after_2", task="train", nproc=2, budget_s=90,
              args=dict(seed=seed + 777, resume=True, ckpt=ckpt_after, **common)),
         dict(name="step", task="step", nproc=2, budget_s=90, args=dict(seed=seed))],  # neither is timed
        [dict(name="step_ref", task="step_ref", target="solutions", nproc=2, budget_s=90, args=dict(seed=seed))],
        [dict(name="throughput", task="throughput", nproc=2, budget_s=120)],
    ]
    runs = h.run_phases(phases, need)
    return [EVALUATORS[c.name](c, runs) for c in checks], info(runs)
