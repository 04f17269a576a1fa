"""Checkpoint and exact resume of a CP x DP run: what state a context-parallel mesh holds, and who writes it.

    torchrun --nproc_per_node 4 -m solutions.lab9_long_context.cp_checkpoint     # dp 2 x cp 2: save, resume, compare
    torchrun --nproc_per_node 2 -m solutions.lab9_long_context.cp_checkpoint --dp 1

Context parallelism splits activations, not parameters. Which state a (dp, cp) mesh holds after a cp_dp_step,
on which ranks, and whether any bit of it differs from one rank to another, is this file's question: the answer
decides who must write, and what a rank must wait for. What a resume needs is lab 1's list, less what this job
does not have: dropout is off under CP here (apply_context_parallel refuses it), so a step draws no random
numbers.

The checker kills a job inside a save's write and resumes it in fresh processes: the checkpoint that loads must be
the last complete one, and the weights after every later step bit-identical to an uninterrupted job's. A
checkpoint that carries no trace of the layout could be loaded by a job under another (dp, cp) (equal within float
rounding there, not bit for bit: its reductions sum in another order).
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from labs.common import checkpoint as ckpt


def save_cp_checkpoint(path, model, optimizer, scheduler, sampler, step: int, group=None) -> None:
    """Every rank of the mesh calls it after `step` completed steps (`group`: every rank of the dp x cp mesh; None:
    the world). When it returns on any rank, `path` holds what a fresh job needs to take step + 1 exactly as this
    one would; a kill at any moment during it leaves `path` holding the previous checkpoint, whole."""
    # BEGIN SOLUTION When save returns on any rank, path holds everything a fresh job needs to take step + 1 exactly
    #                as this job would (the checker resumes from it in fresh processes, initialised otherwise, and
    #                compares every later step's weights bit for bit), and at no moment does path hold half a file: a
    #                kill during the write leaves the previous checkpoint loadable. Every rank of the mesh calls it;
    #                how many of them must write, you derive from what each rank holds.
    # HINT 1         Which of this state differs from one rank of the mesh to another, after a cp_dp_step? If none
    #                does, how many ranks need to write it, and what must the others wait for before they go on?
    #                Then lab 1's question: what does a kill halfway through an ordinary write leave on disk?
    # HINT 2         The state: weights and AdamW's moments (12 B/param; gradients are made anew each step), the
    #                schedule's position, the sampler's, the step; no RNG (no dropout under CP). After cp_dp_step's
    #                averaged update every rank holds the same bits, so rank 0 of `group` writes one dict of every
    #                object's state_dict() and the step, with labs.common.checkpoint.atomic_save (a temporary file,
    #                then a rename); then a barrier of the group, so no rank goes on before the checkpoint is on disk.
    # HINT 3         if dist.get_rank(group) == 0: ckpt.atomic_save({'model': model.state_dict(), 'optimizer':
    #                optimizer.state_dict(), 'scheduler': scheduler.state_dict(), 'sampler': sampler.state_dict(),
    #                'step': step}, path); then dist.barrier(group=group).
    if dist.get_rank(group) == 0:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "sampler": sampler.state_dict(),
            "step": step,
        }
        ckpt.atomic_save(state, path)
    dist.barrier(group=group)
    # END SOLUTION


def load_cp_checkpoint(path, model, optimizer, scheduler, sampler, group=None) -> int:
    """Every rank: restore what save_cp_checkpoint wrote into freshly built objects (the model already under
    apply_context_parallel, initialised otherwise); return the saved step. The next cp_dp_step must then be
    bit-identical to the uninterrupted run's."""
    # BEGIN SOLUTION Into fresh objects, built and initialised otherwise, every rank restores everything the save
    #                wrote, and returns the saved step: the next step's weights must equal the uninterrupted run's
    #                bit for bit, on every rank of the mesh.
    # HINT 1         Resume is the save in reverse, on every rank: each piece back into the object it came from.
    #                Which piece, left out, would change the next step, and how would the step differ?
    # HINT 2         Every rank reads the one file (labs.common.checkpoint.load: weights_only) and calls each
    #                object's load_state_dict (moments left out: another update; schedule: another learning rate;
    #                sampler: batches seen again); the model's parameter names are unchanged by
    #                apply_context_parallel, so its state_dict loads as it was saved.
    # HINT 3         state = ckpt.load(path); model.load_state_dict(state['model']); the same for optimizer,
    #                scheduler and sampler; return state['step'].
    state = ckpt.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler.load_state_dict(state["sampler"])
    return state["step"]
    # END SOLUTION


def main(argv=None) -> None:
    import dataclasses
    import shutil
    import tempfile

    from torch.distributed.device_mesh import init_device_mesh

    from labs.common import dist as cdist
    from labs.common.data import BatchSampler, TokenFile, ensure_corpus
    from labs.common.model import build_model, get_config
    from labs.common.optim import make_optimizer, make_scheduler

    from .cp_step import apply_context_parallel, cp_dp_step, shard_batch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--save-at", type=int, default=3)
    args = ap.parse_args(argv)
    env = cdist.init(timeout_s=60)
    mesh = init_device_mesh(env.device.type, (args.dp, env.world_size // args.dp), mesh_dim_names=("dp", "cp"))
    cfg = dataclasses.replace(get_config("tiny"), dropout=0.0)
    data = TokenFile.open(ensure_corpus(cfg.vocab_size))
    folder = [tempfile.mkdtemp(prefix="lab9-cp-ckpt-") if env.rank == 0 else None]
    dist.broadcast_object_list(folder)  # a folder every rank reaches
    path = [f"{folder[0]}/ckpt.pt"]

    def job(seed, resume):
        """A fresh job: build, maybe resume, train to --steps (saving at --save-at); the weights after each step."""
        torch.manual_seed(seed)
        model = apply_context_parallel(build_model(cfg).to(env.device), mesh.get_group("cp"), cfg.block_size)
        opt = make_optimizer(model)
        sched = make_scheduler(opt, warmup=2, total=args.steps)
        sampler = BatchSampler(data.num_windows(cfg.block_size), 4, seed=0)
        start = load_cp_checkpoint(path[0], model, opt, sched, sampler) if resume else 0
        weights = {}
        for step in range(start + 1, args.steps + 1):
            x, y = data.batch(sampler.next_ids(), cfg.block_size, env.device)
            loss = cp_dp_step(model, opt, shard_batch(x, y, mesh))
            sched.step()
            weights[step] = [p.detach().clone() for p in model.parameters()]
            cdist.log(env, f"{'resumed' if resume else 'first'} job, step {step}: loss {loss:.6f}")
            if step == args.save_at and not resume:
                save_cp_checkpoint(path[0], model, opt, sched, sampler, step)
        return weights

    first, again = job(0, False), job(1, True)  # the resumed job starts from other weights: the load must win
    same = all(torch.equal(a, b) for s in again for a, b in zip(first[s], again[s]))
    cdist.log(env, f"resumed after step {args.save_at}: weights after steps {sorted(again)} "
                   f"{'bit-identical to' if same else 'DIFFERENT from'} the uninterrupted job's")
    dist.barrier()
    if env.rank == 0:
        shutil.rmtree(folder[0])
    cdist.teardown()


if __name__ == "__main__":
    main()
