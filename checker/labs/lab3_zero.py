"""Lab 3, worker side: ZeRO-1 and ZeRO-2 by hand, measured against torch's own optimizers.

Equivalence runs use plain SGD with momentum (a gradient twice too large doubles the step; AdamW would
hide it) from seeded random weights, biases included (a term that is zero at initialisation hides
nothing), with an LR schedule (the wrapper must pass the scheduler's LR on). Bytes are counted from the
tensors each rank holds, each storage once: a slice that keeps its whole buffer alive counts as the buffer.
Communication is counted by the checker's CommBytes (installed before learner code is imported).
"""
from __future__ import annotations

import copy

from checker.labs._common import digest, tiny_model

SGD = dict(lr=0.05, momentum=0.9)
BUCKET_MB = 0.1   # tiny (0.48 MB) in 4-5 buckets: several reduce-scatters, overlapped with backward


def perturb(model, seed: int):
    """Seeded random values in every parameter (biases and LayerNorms too), the same on every rank."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g).to(p.device))
    return model


def groups(model, decay: float = 0.01):
    from labs.common.optim import param_groups
    return param_groups(model, decay)


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view counts as everything it keeps alive)."""
    seen, total = set(), 0
    for t in tensors:
        if t is None or not hasattr(t, "untyped_storage") or t.dim() == 0:
            continue  # 0-dim: AdamW's step counters, 4 B per tensor, not model state
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def toy():
    """One tensor of 31 elements: at N = 2 one rank owns no whole tensor, and a flat buffer needs padding."""
    import torch

    torch.manual_seed(5)
    return torch.nn.Linear(31, 1, bias=False)


def _toy_batches(env, steps):
    import torch
    g = torch.Generator().manual_seed(100 + env.rank)
    return [torch.randn(4, 31, generator=g).to(env.device) for _ in range(steps)]


def _ddp_reference(model, env):
    import torch

    from labs.common import dist as cdist
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=cdist.ddp_device_ids(env.device))


def equivalence(make_opt, env, batches, steps=4, replicated_grads=False) -> dict:
    """The learner's optimizer vs torch DDP + SGD on tiny (perturbed) and on the odd-sized toy, with a schedule."""
    import torch
    import torch.distributed as dist

    out, diffs = {}, []
    for name, build, data in (("tiny", lambda: perturb(tiny_model(0), 1).to(env.device), batches),
                              ("toy", lambda: toy().to(env.device), _toy_batches(env, steps))):
        model = build()
        ref = copy.deepcopy(model)
        ddp = _ddp_reference(ref, env)
        mine = _ddp_reference(model, env) if replicated_grads else model  # ZeRO-1 steps averaged gradients
        opt = make_opt(groups(model) if name == "tiny" else list(model.parameters()))
        ref_opt = torch.optim.SGD(groups(ref) if name == "tiny" else list(ref.parameters()), **SGD)
        lam = lambda s: 1.0 / (1 + s)  # noqa: E731  a changing LR: the scheduler edits the outer param_groups
        scheds = [torch.optim.lr_scheduler.LambdaLR(o, lam) for o in (opt, ref_opt)]
        for batch in data[:steps]:
            for m, o in ((mine, opt), (ddp, ref_opt)):
                o.zero_grad(set_to_none=True)
                loss = m(*batch)[1] if name == "tiny" else m(batch).square().mean()
                loss.backward()
                o.step()
            for s in scheds:
                s.step()
            diffs.append(max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters())))
        digests = [None] * env.world_size
        dist.all_gather_object(digests, digest(model.named_parameters()))
        out[name] = {"max_diff": max(diffs[-steps:]), "in_sync": len(set(digests)) == 1}
    return {"max_diff": max(v["max_diff"] for v in out.values()), "in_sync": all(v["in_sync"] for v in out.values()),
            "parts": out}


def kwargs_reach(make_opt, env) -> bool:
    """Does step(**kwargs) reach the wrapped optimizer's step (torch's optimizers and ZeroRedundancyOptimizer
    take keyword arguments there)? The optimizer class given records what its step received."""
    import torch

    class Recording(torch.optim.SGD):
        def step(self, closure=None, **kwargs):
            self.seen = kwargs
            return super().step(closure)
    model = toy().to(env.device)
    opt = make_opt(list(model.parameters()), Recording)
    model(_toy_batches(env, 1)[0]).square().mean().backward()
    opt.step(probe=7)
    return getattr(opt.optim, "seen", None) == {"probe": 7}


def zero1(seam, env, batches) -> dict:
    import torch

    from labs.common.optim import ADAMW

    out = equivalence(lambda params: seam.ShardedOptimizer(params, torch.optim.SGD, **SGD), env, batches,
                      replicated_grads=True)
    out["kwargs"] = kwargs_reach(lambda params, cls: seam.ShardedOptimizer(params, cls, **SGD), env)
    model = tiny_model(0).to(env.device)  # memory: AdamW, after a step
    opt = seam.ShardedOptimizer(groups(model), torch.optim.AdamW, lr=3e-3, **ADAMW)
    for x, y in batches[:1]:
        opt.zero_grad(set_to_none=True)
        model(x, y)[1].backward()
        opt.step()
    out.update(state_bytes=storage_bytes(v for s in opt.optim.state.values() for v in s.values() if torch.is_tensor(v)),
               psi=sum(p.numel() for p in model.parameters()), world_size=env.world_size)
    return out


def zero2(seam, env, batches, comm) -> dict:
    """Equivalence (SGD), then AdamW: bytes held after a step, bytes sent in one step."""
    import torch

    from labs.common.optim import ADAMW
    from labs.instruments.comm_bytes import sent

    out = equivalence(lambda params: seam.Zero2Optimizer(params, torch.optim.SGD, bucket_cap_mb=BUCKET_MB, **SGD),
                      env, batches)
    out["kwargs"] = kwargs_reach(lambda params, cls: seam.Zero2Optimizer(params, cls, bucket_cap_mb=BUCKET_MB, **SGD),
                                 env)
    model = tiny_model(0).to(env.device)
    psi = sum(p.numel() for p in model.parameters())
    opt = seam.Zero2Optimizer(groups(model), torch.optim.AdamW, bucket_cap_mb=BUCKET_MB, lr=3e-3, **ADAMW)
    steps = []
    for x, y in batches[:2]:  # the second step is the one counted: nothing left over from construction
        comm.start()
        opt.zero_grad(set_to_none=True)
        model(x, y)[1].backward()
        opt.step()
        steps.append(comm.stop())
    inner = opt.optim
    moments = storage_bytes(v for s in inner.state.values() for v in s.values() if torch.is_tensor(v))
    grads = storage_bytes([p.grad for p in model.parameters()]
                          + [p.grad for g in inner.param_groups for p in g["params"]])
    last = steps[-1]
    ops = {}
    for op, _, b in last:
        ops[op] = ops.get(op, 0) + b
    out.update(psi=psi, world_size=env.world_size, moments=moments, grads=grads, sent=sent(last),
               sent_by_op=ops, calls=len(last))
    return out
