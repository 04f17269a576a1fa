"""Lab 1's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): from the
runs' measurements to pass/fail. Thresholds are stated once, here, each with its reason."""
from __future__ import annotations

import math

from checker.labs._common import Check, declare, diverged_at, error_result, first_error
from checker.labs._held_save import TORN, last_complete, wrong_start
from checker.labs._windows import departs_at, loss_at, medians, mixed_moments, paired_ratio
from checker.labs.lab1 import WHERE
from checker.labs.lab1.setup import N_STEPS, SAVE_AT
from checker.relay import turn_rates
from checker.report import CheckResult

THROUGHPUT_MIN = 0.8   # learner/reference tokens/s, medians of interleaved windows (noise here is ~15%)
SPEED_LOSS_RTOL = 1e-3  # the timed steps' losses against the reference's: a different but correct step (its own
                        # clip, its own loss) gave 0.0 over 50 steps; one that skips its work when timed, > 1e-2 at once
METER_TOL = 0.05       # relative difference between the learner's meter and the checker's clock
LEARN_FRACTION = 0.5   # the val loss must cover this fraction of the way from ln V to the floor
STALL_MAX = 0.20       # input stall over the learner's loader: in-process ~0.33 (setup.COST_RATIO); 2 workers 0.05-0.10
                       # on 2 busy cores (handing a batch over costs 1-4 ms here: shared memory, an fd per tensor)

CHECKS: list[Check] = []
check = declare(CHECKS)



@check("reproducible", "two fresh processes with one seed give bit-identical losses and weights, within 1e-3 of "
       "the reference's own run from that seed; another seed gives others",
       "A random stream the run draws from is not set by the seed you are given: a generator left unseeded, "
       f"another seed than the argument, or randomness outside the seeded streams ({WHERE}/seeding.py) "
       "(checker hint lab1 seeding.seed_everything)",
       runs={"run_a", "run_b"}, crosscheck=True)
def reproducible(c: Check, runs) -> CheckResult:
    seed_err = [r.result.get("seed_error") for r in (runs.get("run_a"), runs.get("run_b")) if r]
    err = next((e for e in seed_err if e), None) or first_error(runs, "run_a", "run_b")
    if err:
        return error_result(c, err)
    a, b = runs["run_a"].result, runs["run_b"].result
    # one draw from each of Python's, NumPy's and torch's generators right after seeding: same seed, same
    # draw in two processes; another seed, another draw (the run alone only exercises torch's)
    unseeded = [k for k in a["draws"] if a["draws"][k] != b["draws"][k]]
    ignored = [k for k in b["draws"] if b["draws"][k] == b["other_seed_draws"][k]]
    # seeded again with the first seed in the same process: the same draws (a generator seed_everything leaves
    # alone only moves on, so another seed "differs" there too)
    moved_on = [k for k in b["draws"] if b.get("again_draws", {}).get(k) != b["draws"][k]]
    same = a["losses"] == b["losses"] and a["digest"] == b["digest"] and not unseeded
    other = b["other_seed_losses"] != b["losses"][:5] and not ignored and not moved_on
    n = sum(x == y for x, y in zip(a["losses"], b["losses"]))
    if same and other:
        msg = f"{len(a['losses'])} steps bit-identical across two processes; another seed differs"
    elif unseeded:
        msg = f"after seed_everything({a['seed']}), {' and '.join(unseeded)}'s generator gave different numbers " \
              "in two processes: it is not seeded"
    elif not same:
        msg = f"two runs with seed {a['seed']} differ: {diverged_at(a['losses'], b['losses'])}"
    elif moved_on:
        msg = (f"seed_everything({a['seed']}) twice in one process gave {' and '.join(moved_on)}'s generator other "
               "numbers the second time: it is not seeded from the seed (a generator left alone only moves on)")
    elif ignored:
        msg = f"seeds {a['seed']} and {a['seed'] + 1} gave {' and '.join(ignored)}'s generator the same numbers: " \
              "seed it with the seed you are given"
    else:
        msg = f"seed {a['seed'] + 1} gave exactly the run of seed {a['seed']}: the seed argument is ignored"
    if unseeded or ignored or moved_on:  # measured: generators seeded from the seed
        return CheckResult(c.name, False, value=len(a["draws"]) - len(set(unseeded) | set(ignored) | set(moved_on)),
                           threshold=len(a["draws"]), unit="generators seeded", message=msg, hint=c.hint)
    return CheckResult(c.name, same and other, value=n, threshold=len(a["losses"]), unit="identical steps",
                       message=msg, hint=c.hint)


@check("resume_exact", f"train {N_STEPS} steps; separately train {SAVE_AT}, save, train 2 more, SIGKILL inside "
       f"the second save (half its file written), resume in a fresh process: back at step {SAVE_AT}, losses and "
       "final weights bit-identical, every random stream where the save left it",
       "Exact resume: something the uninterrupted run carries forward (weights, AdamW's moments, the "
       "schedule's position, the data position, the step, an RNG stream) was not saved or not restored, or a "
       f"save killed halfway did not leave the previous checkpoint whole ({WHERE}/state.py) "
       "(checker hint lab1 state.save_checkpoint; checker hint lab1 state.load_checkpoint)",
       symptoms=((TORN, "The checkpoint on disk is half-written: the run was killed while writing it, "
                  "and the file it wrote in place is all a resume finds. Write to a temporary name in the same "
                  "folder and rename it over the checkpoint once complete (ckpt.atomic_save does both): a kill "
                  "then leaves the previous one whole (checker hint lab1 state.save_checkpoint)."),),
       runs={"run_a", "resume_1", "resume_2"})
def resume_exact(c: Check, runs) -> CheckResult:
    err = first_error(runs, "run_a", "resume_1", "resume_2")
    if err:
        return error_result(c, err)
    a, r1, r2 = runs["run_a"].result, runs["resume_1"].result, runs["resume_2"].result
    if not runs["resume_1"].killed_on_cue:
        return CheckResult(c.name, False, message="the first half never reported its checkpoint as saved",
                           hint=c.hint)
    saved_at, held = last_complete([r1])
    start = r2["start"]
    if msg := wrong_start(saved_at, held, start):
        return CheckResult(c.name, False, value=start, threshold=saved_at, unit="step", hint=c.hint, message=msg)
    resumed = r1["losses"][:saved_at] + r2["losses"]
    same = resumed == a["losses"] and r2["digest"] == a["digest"]
    saved, loaded = (r1.get("streams_saved") or {}).get(str(saved_at)), r2.get("streams_loaded")
    lost = [k for k in saved or {} if loaded and saved[k] != loaded.get(k)]
    if same and lost:  # on CPU a step draws from torch's stream alone: the others are compared, not trained on
        return CheckResult(c.name, False, value=len(saved) - len(lost), threshold=len(saved), unit="streams restored",
                           hint=c.hint, message=f"resumed from step {start}, losses and weights bit-identical, but "
                           f"right after load_checkpoint {' and '.join(lost)} random stream"
                           f"{'s are' if len(lost) > 1 else ' is'} not where the save left it: a step that draws "
                           "from one (dropout on a GPU, a data augmentation) would not repeat. Every stream the run "
                           "can draw from is saved and restored")
    n = sum(x == y for x, y in zip(resumed, a["losses"]))
    how = (f"killed while writing step {saved_at + 2}'s checkpoint (half of {r1.get('held_path', '?')} written)"
           if held else "killed after its save (no torch.save call for the checker to hold)")
    msg = (f"{how}, resumed from step {start} in a fresh process: steps {start + 1}-{len(resumed)} and final "
           f"weights bit-identical" if same else
           f"{how}, resumed from step {start}: resumed run {diverged_at(resumed, a['losses'])}"
           + (" (just after the resume)" if resumed[start:start + 1] != a["losses"][start:start + 1] else ""))
    return CheckResult(c.name, same, value=n, threshold=len(a["losses"]), unit="identical steps",
                       message=msg, hint=c.hint)


@check("loss_decreases", "the checker's own validation loss falls at least half way from ln(V) to "
       "the data's entropy floor",
       "The model is not learning: its updates never happen, use a stale or wrong gradient, or are undone; "
       f"watch the loss your train_step returns step by step ({WHERE}/step.py) (checker hint lab1 step.train_step)",
       runs={"run_a"})
def loss_decreases(c: Check, runs) -> CheckResult:
    err = first_error(runs, "run_a")
    if err:
        return error_result(c, err, unit="nats")
    a = runs["run_a"].result
    uniform, floor = a["uniform_entropy"], a["entropy_rate"]
    threshold = uniform - LEARN_FRACTION * (uniform - floor)
    ok = math.isfinite(a["val_loss"]) and a["val_loss"] <= threshold
    return CheckResult(c.name, ok, value=round(a["val_loss"], 4), threshold=round(threshold, 4), unit="nats",
                       message=f"checker's val loss {a['val_loss_init']:.3f} -> {a['val_loss']:.3f} in "
                               f"{len(a['losses'])} steps (ln V = {uniform:.3f}, floor {floor:.3f})", hint=c.hint)


@check("step_matches_reference", "your train_step and the reference's side by side from the same random "
       "weights, batches and RNG, with the checker's SGD and scheduler: loss, lr, grad norms before and after "
       "clipping (one step forced over the threshold), .grad and weights after each of 4 steps",
       f"train_step ({WHERE}/step.py) departs from the reference at the step and quantity named above: which "
       "gradient the update uses (cleared when, of which loss, clipped before or after it is used) and how often "
       "the optimizer and the scheduler move (checker hint lab1 step.train_step)",
       needs=("reference",),
       runs={"step", "step_ref"})
def step_matches_reference(c: Check, runs) -> CheckResult:
    from checker.labs._differential import first_difference

    err = first_error(runs, "step", "step_ref")
    if err:
        return error_result(c, err, unit="steps")
    # the learner's steps as its run recorded them; the reference's, and the distances, from the reference's run
    r = {"learner": runs["step"].result["learner"], **runs["step_ref"].result}
    n = len(r["reference"])
    wrong = first_difference(r)
    if wrong is None:
        return CheckResult(c.name, True, value=n, threshold=n, unit="steps", hint=c.hint,
                           message=f"{n} steps (one clipped) equal the reference's: loss, lr, grad norms, .grad, "
                                   "weights")
    step, what, measured, fix = wrong
    clipped = " (the step forced over the clip threshold)" if step == 3 else ""
    return CheckResult(c.name, False, value=step - 1, threshold=n, unit="steps", hint=f"{fix}. {c.hint}",
                       message=f"step {step}{clipped}: {what}: {measured}")


@check("throughput", "your train_step's tokens/s >= 0.8x the reference's, each in a process of its own taking "
       "turns timed by the checker, and the timed steps train as the reference's do",
       f"train_step does more work than the reference ({WHERE}/step.py): most likely extra waits for the "
       "device (every .item()/.cpu() is one), a second forward pass, or Python work per parameter "
       "(checker hint lab1 step.train_step)",
       needs=("reference",),
       runs={"speed", "speed_ref"})
def throughput(c: Check, runs) -> CheckResult:
    err = first_error(runs, "speed", "speed_ref")
    if not err:
        mine, ref = runs["speed"].result, runs["speed_ref"].result
        rates, why = turn_rates(runs["speed"].relay, {"speed": mine["tokens"], "speed_ref": ref["tokens"]})
        err = {"type": "Untimed", "message": why} if why else None
    if err:
        return error_result(c, err, unit="x reference")
    rates = {"learner": rates["speed"], "reference": rates["speed_ref"]}
    ratio, tps = paired_ratio(rates, "learner", "reference"), medians(rates)
    k = departs_at(mine["losses"], ref["losses"], SPEED_LOSS_RTOL)
    if k is not None:
        return CheckResult(c.name, False, value=round(ratio, 3), threshold=THROUGHPUT_MIN, unit="x reference",
                           hint=c.hint, message=f"the timed steps did not train as the reference's: step {k + 1} of "
                           f"the timed run, loss {loss_at(mine['losses'], k)} vs the reference's "
                           f"{loss_at(ref['losses'], k)} "
                           "(same weights, batches and seed): a step timed for speed must do the whole step")
    return CheckResult(c.name, ratio >= THROUGHPUT_MIN, value=round(ratio, 3), threshold=THROUGHPUT_MIN,
                       unit="x reference", hint=c.hint,
                       message=f"yours / reference {ratio:.2f}x (median of the ratios of window pairs, each side in "
                               f"a process of its own, taking turns); median tokens/s: yours {tps['learner']:,.0f}, "
                               f"reference {tps['reference']:,.0f}"
                               + mixed_moments(ratio, tps["learner"], tps["reference"]))


@check("throughput_meter", "ThroughputMeter(warmup_steps=3) agrees with the checker's clock over the same steps "
       "(5%), warm-up steps unlike the window's, and still 0.3 s after the last step; nan before its window holds "
       "a step; on a (faked) GPU, a device wait in every call that reads the clock",
       f"ThroughputMeter ({WHERE}/meters.py) times other steps than the checker: a window that opens a "
       "step early or late, a warm-up step's tokens counted, a window that ends elsewhere than at the last "
       "step() call, a clock read before the device finished, or a number where there is no measurement yet "
       "(checker hint lab1 meters.step; checker hint lab1 meters.tokens_per_s)",
       runs={"measure"})
def throughput_meter(c: Check, runs) -> CheckResult:
    err = first_error(runs, "measure") or runs["measure"].result.get("meter_error")
    if err:
        return error_result(c, err, unit="rel. error")
    m = runs["measure"].result["meter"]
    mine, clock = m["meter_tps"], m["clock_tps"]
    finite = isinstance(mine, (int, float)) and math.isfinite(mine) and mine > 0
    rel = abs(mine / clock - 1) if finite else float("inf")
    msg = (f"your meter {mine if not finite else f'{mine:,.0f}'} tok/s, checker's clock {clock:,.0f} tok/s over the "
           f"same {m.get('steps', 10)} steps after warm-up")
    if rel <= METER_TOL and (why := _meter_contract(runs["measure"].result, mine)):
        return CheckResult(c.name, False, value=round(rel, 4), threshold=METER_TOL, unit="rel. error", hint=c.hint,
                           message=f"{msg}; but {why}")
    return CheckResult(c.name, rel <= METER_TOL, value=round(rel, 4), threshold=METER_TOL, unit="rel. error",
                       hint=c.hint, message=msg)


def _meter_contract(r: dict, rate: float) -> str | None:
    """What the meter does wrong besides its number (measure.py), or None."""
    m, later = r["meter"], r["meter"].get("later_tps")
    if not (isinstance(later, (int, float)) and abs(later / rate - 1) <= METER_TOL):
        said = f"{later:,.0f}" if isinstance(later, (int, float)) else repr(later)
        return (f"read again {m['idle_s']} s after the last step() call it said {said} tok/s: the rate moved while "
                "no step ran. The window ends at the last step() call, not when the rate is read")
    for e in r.get("meter_early") or []:  # a meter with warmup_steps=2, read after 0, 1 and 2 calls
        if not e["nan"]:
            got = f"raised {e['error']['type']}" if e["error"] else f"was {e['rate']}"
            return (f"on a meter with warmup_steps=2, tokens_per_s read after {e['calls']} step() call(s), with no "
                    f"step in the window yet, {got}, not nan: nan is how a caller tells 'no measurement yet' from a "
                    "slow run")
    waits = r.get("meter_waits")
    if waits and not all(waits[1:]):  # warmup_steps=2: the 2nd call opens the window, every later one ends it
        return (f"on a device that queues its work (a GPU, faked: waits counted), step() calls 2-{len(waits)} of a "
                f"meter with warmup_steps=2 waited for the device {', '.join(map(str, waits[1:]))} times: a window "
                "timed without waiting measures kernel launches, not kernels. Read every time the window uses once "
                "the device has finished")
    return None


@check("memory_reported", "model_state_bytes equals 4 B/param weights + 4 B/param grads + AdamW "
       "(8 B/param + 4 B per tensor); and 0 B of grads once zero_grad(set_to_none=True) freed them; 2 B/param "
       "on a bf16 copy",
       f"model_state_bytes ({WHERE}/meters.py) differs from the tensors that exist: a tied weight counted "
       "twice, gradients assumed instead of counted (0 B once freed), bytes per element assumed instead of "
       "read from the tensor, or part of the optimizer's state missed, its per-tensor step count included "
       "(checker hint lab1 meters.model_state_bytes)",
       runs={"memory"}, crosscheck=True)
def memory_reported(c: Check, runs) -> CheckResult:
    err = first_error(runs, "memory") or runs["memory"].result.get("memory_error")
    if err:
        return error_result(c, err, unit="bytes")
    r = runs["memory"].result
    psi, tensors = r["truth"]["psi"], r["truth"]["tensors"]
    want = {"params": 4 * psi, "grads": 4 * psi, "optimizer": 8 * psi + 4 * tensors}
    want["total"] = sum(want.values())
    got = r["memory"]
    if not isinstance(got, dict):
        return CheckResult(c.name, False, hint=c.hint, message=f"model_state_bytes returned {type(got).__name__}; "
                                                             "expected a dict with params, grads, optimizer, total")
    wrong = [f"{k}: {got.get(k)} != {v}" for k, v in want.items() if got.get(k) != v]
    freed = r.get("memory_no_grads")
    if not wrong and isinstance(freed, dict) and freed.get("grads") != 0:  # the measured column: this criterion
        return CheckResult(c.name, False, value=freed.get("grads"), threshold=0, unit="bytes of grads", hint=c.hint,
                           message=f"after zero_grad(set_to_none=True) no .grad exists, yet grads = "
                                   f"{freed.get('grads')} bytes: count the .grad tensors that exist, not the "
                                   "parameters")
    half = r.get("memory_bf16")
    if not wrong and isinstance(half, dict) and half.get("params") != 2 * psi:
        return CheckResult(c.name, False, value=half.get("params"), threshold=2 * psi, unit="bytes of bf16 params",
                           hint=c.hint, message=f"a bf16 copy of the model (2 B per parameter): params = "
                                                f"{half.get('params')!s} bytes, not 2Ψ = {2 * psi:,}: a tensor's bytes "
                                                "per element depend on its dtype; count them from the tensor")
    return CheckResult(c.name, not wrong, value=got.get("total"), threshold=want["total"], unit="bytes", hint=c.hint,
                       message=(f"Ψ={psi:,} params in {tensors} tensors: 16Ψ + 4·{tensors} = {want['total']:,} bytes"
                                if not wrong else "; ".join(wrong) + f" (Ψ={psi:,}, {tensors} tensors)"))


@check("input_pipeline", "over your make_loader (samples that cost CPU time), the checker's own steps wait "
       "for data <= 20% of the time; batches in order",
       f"The model sits waiting for every batch ({WHERE}/pipeline.py): its samples are prepared in the "
       "training process, after the step asks. Where else could that work run, and when, so that each batch is "
       "ready before the step asks? The transform itself stays as it is (checker hint lab1 pipeline.make_loader)",
       starter_runs=True,
       runs={"pipeline"})
def input_pipeline(c: Check, runs) -> CheckResult:
    err = first_error(runs, "pipeline")
    if err:
        return error_result(c, err, unit="input stall")
    r = runs["pipeline"].result
    mine, base = r["learner"], r["baseline"]
    inline = mine.get("on_training_thread", 0)
    ok = mine["stall"] <= STALL_MAX and not inline
    msg = (f"waited {mine['wait_ms']:.1f} ms of each {mine['step_ms']:.1f} ms step for your loader; a pipeline in "
           f"the training process: {base['stall']:.0%} ({base['wait_ms']:.1f} ms) (samples cost {r['cost_ms']:.2f} "
           "ms of CPU each)")
    if inline:  # batches built up front in make_loader wait out of the timed steps, but the model still waited
        msg += (f"; {inline} of {mine['samples']} samples were prepared on the training thread itself "
                "(e.g. all batches built inside make_loader): that work stalls the model whenever it runs")
    return CheckResult(c.name, ok, value=round(mine["stall"], 3), threshold=STALL_MAX, unit="input stall",
                       hint=c.hint, message=msg)
