"""Lab 3's worker side: the ZeRO-1, ZeRO-2 (zero.py) and FSDP2 parts of the correctness run, the speed runs (each
side in a process group of its own, timed in turns), DeepSpeed's stages, and FSDP2 + DCP training with its kill and
resumes. The checks that read them are in checks.py."""
from __future__ import annotations

import copy

from checker import seams
from checker.labs import _crosscheck
from checker.labs._common import digest, probe, take_turn, tiny_model
from checker.labs._held_save import HeldDCPWrite, PublishWatch, SlowRank
from checker.labs.lab3 import (
    BATCH,
    FSDP_TOL,
    GLOBAL,
    LAB,
    RNG_SEED,
    SEQ,
    SGD_TOL,
    SPEED_ROUNDS,
    SPEED_SIZES,
    TRAIN_LOSS_RTOL,
    TRAIN_WHY,
    speed_slots,
)


def _batches(env, steps, same_on_all_ranks=False):
    from labs.common.data import TokenFile, ensure_corpus

    data = TokenFile.open(ensure_corpus(256))
    r = 0 if same_on_all_ranks else env.rank
    return [data.batch(range(s * 64 + r * BATCH, s * 64 + (r + 1) * BATCH), SEQ, env.device) for s in range(steps)]


def _psi(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _local_bytes(t) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def task_probe(ctx, target):
    return probe(LAB, target)


def _unsharded_peak(model):
    """Forward hooks on each block (after FSDP's own): the most parameter bytes not held as a shard."""
    peak = [0]

    def look(*_):
        peak[0] = max(peak[0], sum(_local_bytes(p) for p in model.parameters() if not hasattr(p, "to_local")))
    for block in model.blocks:
        block.register_forward_pre_hook(look)
        block.register_forward_hook(look)
    return peak


def _mp_dtypes(seam, env, x, y) -> dict:
    """apply_fsdp(model, mixed_precision=True), one forward: the dtype of each unit's weights inside its forward
    (pre-hooks after FSDP2's own, which gather and cast them): bfloat16 wherever the precision policy reached."""
    import torch

    model = seam.apply_fsdp(tiny_model(0).to(env.device), mixed_precision=True)
    seen = {}

    def look(name, params):
        def hook(*_):
            seen[name] = str(next(iter(params())).dtype).removeprefix("torch.")
        return hook
    model.register_forward_pre_hook(look("root", lambda: (p for n, p in model.named_parameters()
                                                          if not n.startswith("blocks."))))
    for i, block in enumerate(model.blocks):
        block.register_forward_pre_hook(look(f"block {i}", block.parameters))
    try:
        with torch.no_grad():
            model(x[:1], y[:1])
    except RuntimeError as exc:  # a unit left in float32 meets bfloat16 activations: the dtypes seen so far say which
        seen["forward"] = f"raised {str(exc)[:120]}"
    return seen


def _fsdp(ctx, seam, env, comm, steps=4):
    """FSDP2 vs torch DDP on the same batches: losses, one step's collectives and unsharded peak, bytes held."""
    import torch

    from labs.common import dist as cdist
    from labs.common.optim import make_optimizer
    from labs.instruments.comm_bytes import sent

    ddp_model = tiny_model(0).to(env.device)
    fsdp_model = copy.deepcopy(ddp_model)
    block_bytes = [sum(_local_bytes(p) for p in b.parameters()) for b in ddp_model.blocks]
    ddp = torch.nn.parallel.DistributedDataParallel(ddp_model, device_ids=cdist.ddp_device_ids(env.device))
    fsdp = seam.apply_fsdp(fsdp_model)
    peak = _unsharded_peak(fsdp)
    opts = {"ddp": (ddp, make_optimizer(ddp_model)), "fsdp": (fsdp, make_optimizer(fsdp_model))}
    batches = _batches(env, steps)
    losses = {"ddp": [], "fsdp": []}
    x, y = batches[0]
    comm.start()  # one FSDP2 step, recorded: all-gathers in forward, bytes in all
    loss = fsdp(x, y)[1]
    forward = comm.stop()
    comm.start()
    loss.backward()
    fsdp_bytes = sent(forward) + sent(comm.stop())
    for p in fsdp.parameters():
        p.grad = None
    structure = {"forward_all_gathers": sum(1 for op, *_ in forward if "all_gather" in op), "blocks": len(block_bytes),
                 "peak_unsharded": peak[0], "block_bytes": max(block_bytes),
                 "root_bytes": 4 * _psi(ddp_model) - sum(block_bytes), "sent": fsdp_bytes}
    structure["mp"], structure["mp_error"] = ctx.attempt(lambda: _mp_dtypes(seam, env, x, y))
    for name, (model, opt) in opts.items():
        for x, y in batches:
            opt.zero_grad(set_to_none=True)
            loss = model(x, y)[1]
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    _keeper(ctx, "fsdp_equivalence", FSDP_TOL)("fsdp.losses", losses["fsdp"])
    fsdp_opt = opts["fsdp"][1]
    mine = {"params": sum(_local_bytes(p) for p in fsdp.parameters()),
            "grads": sum(_local_bytes(p.grad) for p in fsdp.parameters() if p.grad is not None),
            "optimizer": sum(_local_bytes(v) for s in fsdp_opt.state.values() for v in s.values()
                             if torch.is_tensor(v))}
    mine["total"] = sum(mine.values())
    out = {"loss_diff": max(abs(a - b) for a, b in zip(losses["ddp"], losses["fsdp"])), "checker_bytes": mine,
           "world_size": env.world_size, "structure": structure,
           "psi": _psi(ddp_model), "tensors": len(list(ddp_model.parameters()))}
    out["learner_bytes"], out["learner_bytes_error"] = ctx.attempt(lambda: seam.model_state_bytes(fsdp, fsdp_opt))
    return out


def _speed_step(model, opt, batches, env) -> list:
    """Steps over `batches`; each step's loss, detached (read after the window: no extra wait inside it)."""
    from labs.common import dist as cdist

    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)[1]
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    cdist.synchronize(env.device)
    return losses


def task_speed(ctx, target, side):
    """One side of the speed ratios, in a process group of its own, timed in turns by the checker (checker/relay.py):
    side "learner" the learner's FSDP2 and Zero2Optimizer (a window of each a round, at its own size, SPEED_SIZES; a
    strategy whose code does not build gives its window to the other), side "ddp" torch DDP (a window at each size a
    round), in a run of the reference's server that never imports the learner's code. Every rank finishes its window
    before rank 0 asks for the next turn (the relay stops and continues the whole group; the other ranks wait in a
    barrier), and every rank starts the next window once rank 0 has its go."""
    import torch

    from labs.common import dist as cdist
    from labs.common.metrics import device_peak_flops, flops_per_token
    from labs.common.optim import ADAMW, make_optimizer, param_groups
    from labs.instruments.profiler import CpuUtilisation

    env = cdist.init(timeout_s=120)  # a rank waits in a barrier while the other run takes its turns
    out = ctx.partial
    base = tiny_model(0).to(env.device)
    opts = {}
    if side == "ddp":  # one DDP model per size: each is the twin of the learner's strategy timed at that size
        for size in SPEED_SIZES:
            ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base),
                                                            device_ids=cdist.ddp_device_ids(env.device))
            opts[f"ddp_{size}"] = (ddp, make_optimizer(ddp.module))
    else:
        seam = seams.load(LAB, target)

        def fsdp():
            model = seam.apply_fsdp(copy.deepcopy(base))
            return model, make_optimizer(model)

        def zero2():
            model = copy.deepcopy(base)
            return model, seam.Zero2Optimizer(param_groups(model), torch.optim.AdamW, lr=3e-3, **ADAMW)
        for name, build in (("fsdp", fsdp), ("zero2", zero2)):
            opts[name], out[f"{name}_error"] = ctx.attempt(build)
            if opts[name] is None:
                del opts[name]
        if not opts:
            raise RuntimeError("neither apply_fsdp nor Zero2Optimizer could be built: nothing to time")
    batches = {size: [(x[:n], y[:n]) for x, y in _batches(env, steps)] for size, (n, steps) in SPEED_SIZES.items()}
    # each window: (what is timed, at whose size)
    windows = [(("ddp", s) if side == "ddp" else (s, s) if s in opts else (next(iter(opts)),) * 2)
               for k in range(SPEED_ROUNDS) for s in speed_slots(k)]
    def model(name, size):  # the model a window trains: the learner's strategy, or DDP's twin at that size
        return f"ddp_{size}" if name == "ddp" else name

    # Every step's loss, by model: the learner's timed steps must train as DDP's twin does (same weights, batches and
    # maths), so a step that skips its work when timed fails (checks.py: _timed_losses).
    losses: dict[str, list] = {}
    for name, size in dict.fromkeys(windows):  # warm-up, untimed: first gradient buffers, FSDP2's first gathers
        losses.setdefault(model(name, size), []).extend(_speed_step(*opts[model(name, size)], batches[size], env))
    cpu, util = CpuUtilisation(), []

    def turn():
        take_turn(ctx, env)
        cpu.read()

    for name, size in windows:
        turn()
        losses[model(name, size)].extend(_speed_step(*opts[model(name, size)], batches[size], env))
        util.append(cpu.read())
    turn()  # the last window ends when the checker hears this
    out["speed"] = {"windows": windows, "world_size": env.world_size, "cpu_util": sum(util) / len(util),
                    "work": {size: n * SEQ * env.world_size * steps for size, (n, steps) in SPEED_SIZES.items()},
                    "peak_flops": device_peak_flops(env.device, cdist.device_name(env.device)),
                    "flops_per_token": flops_per_token(base.cfg, SEQ),
                    "losses": {k: [float(x) for x in v] for k, v in losses.items()}}
    cdist.teardown()
    return out


def _keeper(ctx, check: str, tol: float):
    """keep(key, value) for `check`: the reference's own run allows twice the check's tolerance against the truth
    (both sides within it of the same deterministic truth)."""
    return lambda key, value: _crosscheck.keep(ctx, check, key, value, atol=2 * tol)


def task_correctness(ctx, target):
    from checker.labs.lab3 import zero
    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    comm = CommBytes()  # before the learner's code is imported: every spelling of a collective reaches it
    env = cdist.init(timeout_s=30)
    seam = seams.load(LAB, target)
    out = ctx.partial
    batches = _batches(env, 4)
    out["memory_model"], out["memory_model_error"] = ctx.attempt(lambda: zero.memory_model(seam))
    out["zero1"], out["zero1_error"] = ctx.attempt(lambda: zero.zero1(seam, env, batches, comm,
                                                                      _keeper(ctx, "zero1_equivalence", SGD_TOL)))
    out["zero2"], out["zero2_error"] = ctx.attempt(lambda: zero.zero2(seam, env, batches, comm,
                                                                      _keeper(ctx, "zero2_equivalence", SGD_TOL)))
    out["fsdp"], out["fsdp_error"] = ctx.attempt(lambda: _fsdp(ctx, seam, env, comm))
    cdist.teardown()
    return out


def task_deepspeed(ctx, target, steps=3):
    import torch

    from labs.common import dist as cdist

    env = cdist.init(timeout_s=60)
    seam = seams.load(LAB, target)
    out = ctx.partial
    batches = _batches(env, steps)
    # the course's own step on the same batches: torch DDP + labs.common.optim's AdamW (its betas, its groups),
    # which every stage must equal; stage 0 alone proves only that the stages agree with each other
    from labs.common.optim import make_optimizer

    ref = torch.nn.parallel.DistributedDataParallel(tiny_model(0).to(env.device))
    ref_opt, out["course_losses"] = make_optimizer(ref.module), []
    for x, y in batches:
        loss = ref(x, y)[1]
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
        out["course_losses"].append(loss.item())
    for stage in (0, 1, 2, 3):
        def one(stage=stage):
            model = tiny_model(0).to(env.device)
            psi = _psi(model)
            engine = seam.make_engine(model, stage, BATCH)
            losses = []
            for x, y in batches:
                loss = engine(x, y)[1]
                engine.backward(loss)
                engine.step()
                losses.append(loss.item())
            opt = engine.optimizer  # DeepSpeed 0.19's names for what each stage keeps
            inner = getattr(opt, "optimizer", opt)
            moments = sum(v.numel() * v.element_size() for s in inner.state.values() for v in s.values()
                          if torch.is_tensor(v))
            master = sum(t.numel() * t.element_size() for t in
                         getattr(opt, "single_partition_of_fp32_groups", None)
                         or getattr(opt, "fp32_partitioned_groups_flat", None) or [])
            # what a rank holds between steps: stage 3's partition (ds_tensor) and any parameter kept whole
            weights = sum(4 * (p.data.numel() + (p.ds_tensor.numel() if hasattr(p, "ds_tensor") else 0))
                          for p in model.parameters())
            _keeper(ctx, "deepspeed_stages", FSDP_TOL)(f"stage{stage}.losses", losses)
            return {"losses": losses, "psi": psi, "weights": weights, "master": master, "moments": moments,
                    "world_size": env.world_size,
                    "stage_seen": engine.zero_optimization_stage()}
        out[f"stage{stage}"], out[f"stage{stage}_error"] = ctx.attempt(one)
    cdist.teardown()
    return out


def _pieces(model, opt, sched, sampler) -> dict:
    """A fingerprint of each piece of training state apart, so that a resume that lost one can name it. Sharded
    tensors are compared whole (full_tensor: every rank calls this), so a resume at another world size compares too;
    the RNG is this rank's (python, numpy, torch)."""
    import json

    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict

    def whole(t):
        return t.full_tensor() if hasattr(t, "full_tensor") else t
    model_sd, optim_sd = get_state_dict(model, opt)
    moments = sorted(((f"{k}.{n}", whole(v)) for k, st in optim_sd["state"].items() for n, v in st.items()
                      if torch.is_tensor(v)), key=lambda kv: kv[0])
    sd = sched.state_dict()
    rng = _rng()
    return {"model": digest(sorted(((k, whole(v)) for k, v in model_sd.items()), key=lambda kv: kv[0])),
            "optimizer": digest(moments),
            "scheduler": json.dumps({k: sd.get(k) for k in ("last_epoch", "_last_lr")}),
            "sampler": json.dumps(sampler.state_dict(), sort_keys=True, default=int), "RNG": rng}


def _rng() -> str:
    """A fingerprint of this rank's random streams (python, numpy, torch)."""
    import hashlib
    import random

    import numpy as np
    import torch
    return hashlib.sha256(repr(random.getstate()).encode() + np.random.get_state()[1].tobytes()
                          + torch.get_rng_state().numpy().tobytes()).hexdigest()[:16]


def _folders(root) -> dict:
    """The files in each folder under root named as save_sharded's final folders are (step-NNNNNN, the starter's
    names): what a kill left there for a loader to find."""
    import re
    from pathlib import Path

    return {d.name: sorted(f.name for f in d.iterdir()) for d in sorted(Path(root).iterdir())
            if d.is_dir() and re.fullmatch(r"step-\d{6}", d.name)}


def _optim_keys(root, model) -> dict:
    """The optimizer moments' keys in every complete DCP checkpoint under root: each must carry the fully qualified
    name of its parameter (a key by position loads onto whichever parameter has that position)."""
    from pathlib import Path

    import torch.distributed.checkpoint as dcp

    names = [n for n, _ in model.named_parameters()]
    keys = [k for meta in sorted(Path(root).glob("*/.metadata"))
            for k in dcp.FileSystemReader(str(meta.parent)).read_metadata().state_dict_metadata if "exp_avg" in k]
    return {"moments": len(keys), "unnamed": [k for k in keys if not any(n in k for n in names)][:3]}


def task_train(ctx, target, steps, save_at=None, ckpt=None, resume=False, dropout=0.0, resave=None):
    """FSDP2 + the learner's DCP save/load, GLOBAL sequences per step at any world size. With dropout, each rank
    draws its masks from its own stream (seeded by rank; a resumed run's from another seed), so only a resume
    that restores every rank's own RNG state replays the same masks. With save_at, a checkpoint after step save_at,
    two more steps and a second checkpoint killed once its shards are written, before its .metadata
    (_held_save.HeldDCPWrite). Each piece of state is fingerprinted after the complete save and after a load.
    With resave, three saves into that folder at the end, the last of the step already saved: latest must be replaced
    (a new file), never rewritten, and a second save of a step must leave its complete folder in place. After every
    rename or removal under either folder latest must name a complete one (_held_save.PublishWatch); the last rank
    writes its own files late (_held_save.SlowRank)."""
    import torch

    from labs.common import dist as cdist
    from labs.common.data import BatchSampler, TokenFile, ensure_corpus
    from labs.common.optim import make_optimizer, make_scheduler

    env = cdist.init(timeout_s=30)
    out = ctx.partial
    held = HeldDCPWrite(ctx, out)  # before the learner's code is imported
    PublishWatch(out, [ckpt, resave])  # latest after every rename or removal: a kill could land at each
    SlowRank(env.rank, env.world_size)  # the last rank writes its own files late: publishing before it is done shows
    seam = seams.load(LAB, target)
    data = TokenFile.open(ensure_corpus(256))
    model = seam.apply_fsdp(tiny_model(0 if not resume else 99, dropout).to(env.device))  # resume: load must win
    torch.manual_seed(RNG_SEED + 50 * resume + env.rank)  # the dropout stream: a resume must bring back its own
    opt = make_optimizer(model)
    sched = make_scheduler(opt, warmup=3, total=steps)
    sampler = BatchSampler(data.num_windows(SEQ), GLOBAL, seed=0)  # global order; each rank slices it
    local = GLOBAL // env.world_size
    if resume:
        out["rng_before_load"] = _rng()  # a rank new since the save keeps this stream (its own seed)
        if env.rank == 0:
            out["folders"] = _folders(ckpt)
    start = seam.load_sharded(ckpt, model, opt, sched, sampler) if resume else 0
    out.update(start=start, losses=[], world_size=env.world_size)
    if resume:
        out["loaded_pieces"] = _pieces(model, opt, sched, sampler)
        if env.rank == 0:
            out["optim_keys"] = _optim_keys(ckpt, model)

    def run(a, b):
        import torch.distributed as dist
        for _ in range(a, b):
            ids = sampler.next_ids()[env.rank * local:(env.rank + 1) * local]
            opt.zero_grad(set_to_none=True)
            loss = model(*data.batch(ids, SEQ, env.device))[1]
            loss.backward()
            opt.step()
            sched.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            out["losses"].append((mean / env.world_size).item().hex())

    run(start, save_at or steps)
    if save_at:
        seam.save_sharded(ckpt, model, opt, sched, sampler, save_at)  # complete: what a resume comes back to
        out["complete_at"], out["saved_pieces"] = save_at, _pieces(model, opt, sched, sampler)
        run(save_at, save_at + 2)
        held.armed = True  # the next DCP save's shards are written, then the kill, before its .metadata
        seam.save_sharded(ckpt, model, opt, sched, sampler, save_at + 2)
        out["held"] = False  # no DCP file write to hold: the kill lands after the save instead
        ctx.await_kill(out, lambda: run(save_at + 2, steps))
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    out["digest"] = digest(full.items())
    if not (save_at or resume):  # the uninterrupted run, judged again by the reference's own run of it
        _crosscheck.keep(ctx, "sharded_resume", "the uninterrupted run's losses, step by step",
                         [float.fromhex(x) for x in out["losses"]], rtol=TRAIN_LOSS_RTOL,
                         why=TRAIN_WHY)
    if resave:
        import os
        from pathlib import Path
        inodes = []
        for s in (steps, steps + 1, steps + 1):  # the last: a second save of the step latest names
            seam.save_sharded(resave, model, opt, sched, sampler, s)
            latest = Path(resave) / "latest"
            inodes.append(os.stat(latest).st_ino if latest.exists() else None)
        out["latest_inodes"] = inodes
    cdist.teardown()
    return out


TASKS = {"probe": task_probe, "correctness": task_correctness, "speed": task_speed, "deepspeed": task_deepspeed,
         "train": task_train}
