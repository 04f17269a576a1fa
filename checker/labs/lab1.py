"""Lab 1 checks: reproducibility, exact resume after a SIGKILL, learning, speed, meters, input pipeline.

Worker side (`task_*`, run by checker.worker next to the learner's code) measures; checker side
(`grade`) compares. Every number in the report is computed here, from tensors and clocks the
checker reads itself: the loss that counts is the checker's own validation loss, the bytes that
count come from the formula, the speed from the checker's timer.
"""
from __future__ import annotations

import functools

from checker import seams
from checker.labs import lab1_measure
from checker.labs._common import Check, digest, probe
from checker.labs._held_save import TORN, HeldSave
from checker.labs.lab1_setup import (
    BATCH,
    DATA_SEED,
    N_STEPS,
    SAVE_AT,
    SEED,
    SEQ,
    _setup,
    _step_in,
)
from checker.relay import Relay

LAB = "lab1"
WORLD_SIZE = 1
WHERE = "labs/lab1_baseline"

CHECKS = [
    Check("reproducible", "two fresh processes with one seed give bit-identical losses and weights; "
          "another seed gives others",
          "A random stream the run draws from is not set by the seed you are given: a generator left unseeded, "
          f"another seed than the argument, or randomness outside the seeded streams ({WHERE}/seeding.py) "
          "(checker hint lab1 seeding.seed_everything)"),
    Check("resume_exact", f"train {N_STEPS} steps; separately train {SAVE_AT}, save, train 2 more, SIGKILL inside "
          f"the second save (half its file written), resume in a fresh process: back at step {SAVE_AT}, losses and "
          "final weights bit-identical, every random stream where the save left it",
          "Exact resume: something the uninterrupted run carries forward (weights, AdamW's moments, the "
          "schedule's position, the data position, the step, an RNG stream) was not saved or not restored, or a "
          f"save killed halfway did not leave the previous checkpoint whole ({WHERE}/state.py) "
          "(checker hint lab1 state.save_checkpoint; checker hint lab1 state.load_checkpoint)",
          symptoms=((TORN, "The checkpoint on disk is half-written: the run was killed while writing it, "
                     "and the file it wrote in place is all a resume finds. Write to a temporary name in the same "
                     "folder and rename it over the checkpoint once complete (ckpt.atomic_save does both): a kill "
                     "then leaves the previous one whole (checker hint lab1 state.save_checkpoint)."),)),
    Check("loss_decreases", "the checker's own validation loss falls at least half way from ln(V) to "
          "the data's entropy floor",
          "The model is not learning: its updates never happen, use a stale or wrong gradient, or are undone; "
          f"watch the loss your train_step returns step by step ({WHERE}/step.py) (checker hint lab1 step.train_step)"),
    Check("step_matches_reference", "your train_step and the reference's side by side from the same random "
          "weights, batches and RNG, with the checker's SGD and scheduler: loss, lr, grad norms before and after "
          "clipping (one step forced over the threshold), .grad and weights after each of 4 steps",
          f"train_step ({WHERE}/step.py) departs from the reference at the step and quantity named above: which "
          "gradient the update uses (cleared when, of which loss, clipped before or after it is used) and how often "
          "the optimizer and the scheduler move (checker hint lab1 step.train_step)",
          needs=("reference",)),
    Check("throughput", "your train_step's tokens/s >= 0.8x the reference's, each in a process of its own taking "
          "turns timed by the checker, and the timed steps train as the reference's do",
          f"train_step does more work than the reference ({WHERE}/step.py): most likely extra waits for the "
          "device (every .item()/.cpu() is one), a second forward pass, or Python work per parameter "
          "(checker hint lab1 step.train_step)",
          needs=("reference",)),
    Check("throughput_meter", "ThroughputMeter(warmup_steps=3) agrees with the checker's clock over the same steps "
          "(5%), warm-up steps unlike the window's, and still 0.3 s after the last step; nan before its window holds "
          "a step; on a (faked) GPU, a device wait in every call that reads the clock",
          f"ThroughputMeter ({WHERE}/meters.py) times other steps than the checker: a window that opens a "
          "step early or late, a warm-up step's tokens counted, a window that ends elsewhere than at the last "
          "step() call, a clock read before the device finished, or a number where there is no measurement yet "
          "(checker hint lab1 meters.step; checker hint lab1 meters.tokens_per_s)"),
    Check("memory_reported", "model_state_bytes equals 4 B/param weights + 4 B/param grads + AdamW "
          "(8 B/param + 4 B per tensor); and 0 B of grads once zero_grad(set_to_none=True) freed them; 2 B/param "
          "on a bf16 copy",
          f"model_state_bytes ({WHERE}/meters.py) differs from the tensors that exist: a tied weight counted "
          "twice, gradients assumed instead of counted (0 B once freed), bytes per element assumed instead of "
          "read from the tensor, or part of the optimizer's state missed, its per-tensor step count included "
          "(checker hint lab1 meters.model_state_bytes)"),
    Check("input_pipeline", "over your make_loader (samples that cost CPU time), the checker's own steps wait "
          "for data <= 20% of the time; batches in order",
          f"The model sits waiting for every batch ({WHERE}/pipeline.py): its samples are prepared in the "
          "training process, after the step asks. At stake: preparation that runs ahead of training, in "
          "DataLoader worker processes with batches prefetched, so each is ready before the step asks; the "
          "transform itself stays as it is (checker hint lab1 pipeline.make_loader)",
          starter_runs=True),
]


# ---------------------------------------------------------------- worker side
def _learner_seed(ctx, seam, out: dict):
    """The learner's seed_everything; if it raises, a plain seed instead, so that checks of other
    functions (resume, learning) still run and only `reproducible` reports the seeding error."""
    def seed_fn(seed):
        _, err = ctx.attempt(lambda: seam.seed_everything(seed))
        if err:
            import torch
            out["seed_error"] = err
            torch.manual_seed(seed)
    return seed_fn


def _draws() -> dict:
    """One number from each generator seed_everything seeds (the run itself only draws from torch's)."""
    import random

    import numpy as np
    import torch
    return {"random": random.random().hex(), "numpy": float(np.random.random()).hex(),
            "torch": torch.rand(()).item().hex()}


def _streams() -> dict:
    """A fingerprint of each random stream a step may draw from (Python's, NumPy's, torch's CPU one, the device's):
    a resume must come back with every one where the save left it, though on CPU a step draws from torch's alone
    (on a GPU dropout draws from the device's)."""
    import hashlib
    import random

    import numpy as np
    import torch

    from labs.common import dist as cdist

    def h(b: bytes) -> str:
        return hashlib.sha1(b).hexdigest()[:12]

    kind, keys, pos, *rest = np.random.get_state()
    device = cdist.device_rng_state()
    return {"Python's": h(repr(random.getstate()).encode()), "NumPy's": h(keys.tobytes() + repr((pos, *rest)).encode()),
            "torch's CPU": h(torch.get_rng_state().numpy().tobytes()),
            "the device's": None if device is None else h(device.cpu().numpy().tobytes())}


def _val_loss(model, data_dir, device) -> float:
    import torch

    from labs.common.data import TokenFile

    val = TokenFile.open(data_dir, "val")
    model.eval()
    with torch.no_grad():
        losses = [model(*val.batch(range(i * BATCH, (i + 1) * BATCH), SEQ, device))[1].item() for i in range(8)]
    model.train()
    return sum(losses) / len(losses)


def _run_steps(seam, env, data, model, opt, sched, sampler, start: int, stop: int) -> list[str]:
    losses = []
    train_step = _step_in(env, seam.train_step)
    for _ in range(start, stop):
        loss = train_step(model, opt, sched, data.batch(sampler.next_ids(), SEQ, env.device))
        if not isinstance(loss, float):
            raise TypeError(f"train_step returned {type(loss).__name__}, expected a Python float (loss.item())")
        losses.append(loss.hex())  # hex: exact, so "bit-identical" means what it says
    return losses


def _data_file():
    from labs.common.data import TokenFile, ensure_corpus
    return TokenFile.open(ensure_corpus(256))


def task_probe(ctx, target):
    return probe(LAB, target)


def task_train(ctx, target, seed, steps, save_at=None, ckpt=None, resume=False, other_seed=None, evaluate=False,
               data_seed=DATA_SEED):
    """Steps of the learner's train_step from `seed`, each loss kept exactly; with save_at, a checkpoint after step
    save_at, two more steps and a second checkpoint killed half-written (_held_save.py); with resume, the steps after
    the learner's load_checkpoint."""
    out = ctx.partial
    held = HeldSave(ctx, out)  # before the learner's code is imported
    seam = seams.load(LAB, target)
    out["seed"] = seed
    seed_fn = _learner_seed(ctx, seam, out)
    env, data, model, opt, sched, sampler = _setup(seed_fn, seed, data_seed)
    out["draws"] = _draws()
    if evaluate:
        out["val_loss_init"] = _val_loss(model, data.directory, env.device)
    start = seam.load_checkpoint(ckpt, model, opt, sched, sampler) if resume else 0
    out["start"] = start
    if resume:
        out["streams_loaded"] = _streams()
    out["losses"] = _run_steps(seam, env, data, model, opt, sched, sampler, start, save_at or steps)
    if save_at:
        out["streams_saved"] = {str(save_at): _streams()}  # what a resume from this step must find again
        seam.save_checkpoint(ckpt, model, opt, sched, sampler, save_at)  # complete: what a resume comes back to
        out["complete_at"] = save_at
        out["losses"] += _run_steps(seam, env, data, model, opt, sched, sampler, save_at, save_at + 2)
        held.armed = True  # the next torch.save is cut in half and the run killed inside it
        out["streams_saved"][str(save_at + 2)] = _streams()
        seam.save_checkpoint(ckpt, model, opt, sched, sampler, save_at + 2)
        out["held"] = False  # no torch.save was called: the kill lands after the save instead
        ctx.await_kill(out, lambda: _run_steps(seam, env, data, model, opt, sched, sampler, save_at + 2, steps))
    out["digest"] = digest(model.named_parameters())
    if evaluate:
        out["val_loss"] = _val_loss(model, data.directory, env.device)
        out.update({k: data.meta[k] for k in ("entropy_rate", "uniform_entropy")})
    if other_seed is not None:  # the seed must matter: another one gives another run
        env, data, model, opt, sched, sampler = _setup(seed_fn, other_seed, data_seed)
        out["other_seed_draws"] = _draws()
        out["other_seed_losses"] = _run_steps(seam, env, data, model, opt, sched, sampler, 0, 5)
        _setup(seed_fn, seed, data_seed)  # the first seed again, in this process: its draws again, not the next ones
        out["again_draws"] = _draws()
    return out


# The differential step's clip threshold, not train_step's default 1.0: a threshold fixed in the code shows. Steps 1,
# 2 and 4 have a gradient norm ~0.7, under it; step 3 has its logits x5, norm ~5, over it.
GRAD_CLIP = 2.0


def _step_plan(seed):
    """The differential step's set-up, the same in the learner's run and the reference's: randomised weights
    (dropout on: both sides draw the same masks) and 4 batches."""
    from checker.labs._common import tiny_model
    from checker.labs._differential import logit_scale, randomise
    from labs.common import dist as cdist

    env, data = cdist.init(), _data_file()
    model = tiny_model(seed, dropout=0.1).to(env.device)
    randomise(model, seed)
    plan = [(data.batch(range(k * BATCH, (k + 1) * BATCH), SEQ, env.device), 5.0 if k == 2 else 1.0) for k in range(4)]
    return model, logit_scale(model), plan


def _snapshots_path(ctx):
    return ctx.workdir / "step.learner.pt"


def task_step(ctx, target, seed=SEED):
    """The learner's train_step over the differential plan (checker/labs/_differential.py): what each step did, and
    the weights and .grad after it, for the reference's own run (task_step_ref) to compare."""
    import torch

    from checker.labs._differential import trajectory

    seam = seams.load(LAB, target)
    model, set_scale, plan = _step_plan(seed)
    recs, snaps = trajectory(functools.partial(seam.train_step, grad_clip=GRAD_CLIP), model, set_scale, plan, seed)
    torch.save([(w, g) for w, g in snaps], _snapshots_path(ctx))
    return {"learner": recs}


def task_step_ref(ctx, target, seed=SEED):
    """The reference's train_step over the same plan, in a run that never imports the learner's code, and how far
    the learner's snapshots (task_step, an earlier phase) are from its own."""
    import torch

    from checker.labs._differential import compare, trajectory

    ref = seams.load(LAB, "solutions")
    model, set_scale, plan = _step_plan(seed)
    recs, snaps = trajectory(functools.partial(ref.train_step, grad_clip=GRAD_CLIP), model, set_scale, plan, seed)
    path = _snapshots_path(ctx)
    if not path.exists():
        return {"reference": recs, "diffs": None}
    learner = torch.load(path, weights_only=True)
    path.unlink()
    return {"reference": recs, "diffs": compare(snaps, learner)}


TASKS = {"probe": task_probe, "train": task_train, "step": task_step, "step_ref": task_step_ref,
         "speed": lab1_measure.task_speed, "measure": lab1_measure.task_measure, "pipeline": lab1_measure.task_pipeline}


# ---------------------------------------------------------------- checker side
RUNS = {  # which runs each check needs; --only runs just those
    "reproducible": {"run_a", "run_b"}, "resume_exact": {"run_a", "resume_1", "resume_2"},
    "loss_decreases": {"run_a"}, "step_matches_reference": {"step", "step_ref"}, "throughput": {"speed", "speed_ref"},
    "throughput_meter": {"measure"}, "memory_reported": {"measure"}, "input_pipeline": {"pipeline"},
}


def grade(h, checks: list[Check]) -> tuple[list, list]:
    from checker.labs import lab1_eval

    need = set().union(*(RUNS[c.name] for c in checks))
    v = h.variant  # hidden variants move the seed, the data order and the kill step
    seed, data_seed, save_at = SEED + 7919 * v, DATA_SEED + v, SAVE_AT + (13 * v) % 30
    common = dict(steps=N_STEPS, data_seed=data_seed)
    ckpt = str(h.workdir / "ckpt.pt")
    relay = Relay(lab1_measure.speed_order("speed", "speed_ref"))
    runs = h.run_phases([
        [dict(name="run_a", task="train", args=dict(seed=seed, evaluate=True, **common), budget_s=60),
         dict(name="run_b", task="train", args=dict(seed=seed, other_seed=seed + 1, **common), budget_s=60),
         dict(name="resume_1", task="train", budget_s=60, kill_on="saved",
              args=dict(seed=seed, save_at=save_at, ckpt=ckpt, **common))],
        # a different seed first: only what the checkpoint restores may matter
        [dict(name="resume_2", task="train", args=dict(seed=seed + 777, resume=True, ckpt=ckpt, **common), budget_s=60),
         dict(name="step", task="step", args=dict(seed=seed), budget_s=60)],
        # the reference in runs of its own, which never import the learner's code (checker/relay.py)
        [dict(name="step_ref", task="step_ref", target="solutions", args=dict(seed=seed), budget_s=60)],
        [dict(name="speed", task="speed", args=dict(seed=seed), budget_s=90, relay=relay),  # alone: timed in turns
         dict(name="speed_ref", task="speed", target="solutions", args=dict(seed=seed), budget_s=90, relay=relay)],
        [dict(name="measure", task="measure", args={}, budget_s=90)],  # alone: it times things
        [dict(name="pipeline", task="pipeline", args={}, budget_s=60)],  # alone: its workers need the other core
    ], need)
    results = [lab1_eval.EVALUATORS[c.name](c, runs) for c in checks]
    return results, lab1_eval.info(runs)


