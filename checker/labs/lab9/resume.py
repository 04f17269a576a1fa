"""Lab 9's resume runs (4 ranks, dp 2 x cp 2, ranks started by checker/spawn.py), worker side: a CP x DP job killed
inside a checkpoint's write, then resumed by fresh processes.

Three jobs train the tiny GPT (dropout 0) with the learner's apply_context_parallel and cp_dp_step, AdamW and a
warm-up schedule, on zig-zag tokens of the checker's own sampler and split:
  cp_full     uninterrupted, STEPS steps.
  cp_killed   saves after step save_at (that save completes), trains on, and saves again after step kill_at: the
              checker holds that second write half done (checker/labs/_held_save.py; torch.save: half the bytes on
              disk, flushed; DCP: the shards written, not .metadata) and SIGKILLs every rank (kill_on). A save that
              writes straight to its file leaves a torn checkpoint; an atomic one leaves the step-save_at one whole.
  cp_resumed  fresh processes, other initial weights (the load must win): load, then train to STEPS.
What is compared is measured by the checker beneath the learner's code: a digest of every weight after every step
(bit-identical means equal digests), and the loss each step returned, shown only.
"""
from __future__ import annotations

import time

from checker import seams
from checker.labs._common import digest, tiny_model
from checker.labs._held_save import HeldDCPWrite, HeldSave
from checker.labs.lab9 import LAB
from checker.labs.lab9.measure import shard
from checker.labs.lab9.shapes import KILL, RESUME


def task_cp_train(ctx, target, ckpt, seed, steps, save_at=None, kill_at=None, resume=False, cp=RESUME):
    """Train the CP x DP job from step 0 (or from the learner's checkpoint, resume) to `steps`; with save_at and
    kill_at, save after each and be killed inside the second save's write."""
    import torch.distributed as dist

    from labs.common import dist as cdist
    from labs.common.data import BatchSampler, TokenFile, ensure_corpus
    from labs.common.optim import make_optimizer, make_scheduler

    env = cdist.init(timeout_s=20)
    out = ctx.partial
    out.update(trained=[], start=0, save_at=save_at, kill_at=kill_at)
    # Before the learner's code is imported. torch.save: the rank that writes cues the kill (rank 0 alone writes the
    # replicated state, its peers wait in the learner's barrier); DCP: every rank writes its shards
    held = (HeldSave(ctx, out, together=False, cue=KILL, grace_s=0.5), HeldDCPWrite(ctx, out, cue=KILL))
    n_cp, n_dp = cp["cp"], cp["dp"]
    groups = [dist.new_group([d * n_cp + c for c in range(n_cp)]) for d in range(n_dp)]  # every rank makes each
    d, c = divmod(env.rank, n_cp)
    rows = cp["batch"] // n_dp
    data = TokenFile.open(ensure_corpus(256))
    seam = seams.load(LAB, target)

    def build():
        model = tiny_model(seed + 99 * resume).to(env.device)  # resume: other weights, the load must win
        s = model.cfg.block_size
        model = seam.apply_context_parallel(model, groups[d], s, "zigzag") or model
        opt = make_optimizer(model)
        return model, opt, make_scheduler(opt, warmup=cp["warmup"], total=steps), \
            BatchSampler(data.num_windows(s), cp["batch"], seed=seed)
    built, out["build_error"] = ctx.attempt(build)
    if out["build_error"]:
        return out
    model, opt, sched, sampler = built
    if resume:
        out["start"], out["load_error"] = ctx.attempt(lambda: seam.load_cp_checkpoint(ckpt, model, opt, sched,
                                                                                      sampler))
        if out["load_error"]:
            return out

    def train(stop):
        for step in range(out["start"] + len(out["trained"]) + 1, stop + 1):
            x, y = data.batch(sampler.next_ids(), model.cfg.block_size, env.device)
            local = [shard(t[d * rows:(d + 1) * rows, None, :, None], c, n_cp, "zigzag")[:, 0, :, 0] for t in (x, y)]
            loss = seam.cp_dp_step(model, opt, local)
            sched.step()
            out["trained"].append([step, float(loss).hex(), digest(model.named_parameters())])

    def until_killed():
        train(save_at)
        seam.save_cp_checkpoint(ckpt, model, opt, sched, sampler, save_at)
        train(kill_at)
        ctx.write(out)
        dist.barrier()  # every rank has reported before any write is held
        for h in held:
            h.armed = True
        seam.save_cp_checkpoint(ckpt, model, opt, sched, sampler, kill_at)
        # This rank's save returned. Either no write of this save went through torch.save or DCP (nothing was held;
        # the checker kills the job after it instead), or another rank's write is held and never ends: then this
        # rank returned before the checkpoint was on disk (cp_resume fails it; the holding rank waits 0.5 s before
        # it cues the kill, for this report to get out).
        for h in held:
            h.armed = False
        out["returned"] = True
        ctx.write(out)
        dist.barrier()
        ctx.cue(KILL)
        time.sleep(3600)
    _, out["train_error"] = ctx.attempt(until_killed if kill_at else lambda: train(steps))
    if out["train_error"]:
        return out
    cdist.teardown()
    return out


TASKS = {"cp_train": task_cp_train}
