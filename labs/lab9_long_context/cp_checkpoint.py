# GENERATED from solutions/lab9_long_context/cp_checkpoint.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Checkpoint and exact resume of a CP x DP run: what state a context-parallel mesh holds, and who writes it.

    torchrun --nproc_per_node 4 -m labs.lab9_long_context.cp_checkpoint     # dp 2 x cp 2: save, resume, compare
    torchrun --nproc_per_node 2 -m labs.lab9_long_context.cp_checkpoint --dp 1

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
    raise NotImplementedError("TODO(lab9): When save returns on any rank, path holds everything a fresh job needs to "
                              "take step + 1 exactly as this job would (the checker resumes from it in fresh "
                              "processes, initialised otherwise, and compares every later step's weights bit for bit), "
                              "and at no moment does path hold half a file: a kill during the write leaves the "
                              "previous checkpoint loadable. Every rank of the mesh calls it; how many of them must "
                              "write, you derive from what each rank holds. (hints: checker hint lab9 "
                              "cp_checkpoint.save_cp_checkpoint)")


def load_cp_checkpoint(path, model, optimizer, scheduler, sampler, group=None) -> int:
    """Every rank: restore what save_cp_checkpoint wrote into freshly built objects (the model already under
    apply_context_parallel, initialised otherwise); return the saved step. The next cp_dp_step must then be
    bit-identical to the uninterrupted run's."""
    raise NotImplementedError("TODO(lab9): Into fresh objects, built and initialised otherwise, every rank restores "
                              "everything the save wrote, and returns the saved step: the next step's weights must "
                              "equal the uninterrupted run's bit for bit, on every rank of the mesh. (hints: checker "
                              "hint lab9 cp_checkpoint.load_cp_checkpoint)")


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
