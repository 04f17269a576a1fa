"""Lab 1's worker side: the training, resume and differential-step runs (the timed ones are in measure.py)."""
from __future__ import annotations

import functools

from checker import seams
from checker.labs import _crosscheck
from checker.labs._common import digest, probe
from checker.labs._held_save import HeldSave
from checker.labs.lab1 import LAB, measure
from checker.labs.lab1.setup import BATCH, DATA_SEED, SEED, SEQ, TRAIN_LOSS_RTOL, TRAIN_WHY, _setup, _step_in


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
    if not (save_at or resume):  # the uninterrupted run, judged again by the reference's own run of it
        _crosscheck.keep(ctx, "reproducible", "the training run's losses, step by step",
                         [float.fromhex(x) for x in out["losses"]], rtol=TRAIN_LOSS_RTOL, why=TRAIN_WHY)
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
         "speed": measure.task_speed, "measure": measure.task_measure, "memory": measure.task_memory,
         "pipeline": measure.task_pipeline}
