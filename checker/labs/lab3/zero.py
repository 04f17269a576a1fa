"""Lab 3, worker side: ZeRO-1 and ZeRO-2 by hand, measured against torch's own optimizers.

Equivalence runs use plain SGD with momentum (a gradient twice too large doubles the step; AdamW would
hide it) from seeded random weights, biases included (a term that is zero at initialisation hides
nothing), with an LR schedule (the wrapper must pass the scheduler's LR on). Bytes are counted from the
tensors each rank holds, each storage once: a slice that keeps its whole buffer alive counts as the buffer.
Communication is counted by the checker's CommBytes (installed before learner code is imported); which of its
handles were waited on, and when, by _handles.HandleLog.
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


def _toy_batches(env, steps, width=31, dtype=None):
    import torch
    g = torch.Generator().manual_seed(100 + env.rank)
    return [torch.randn(4, width, generator=g, dtype=dtype).to(env.device) for _ in range(steps)]


def toy2():
    """float64 tensors a (31), b (2), c (5): b shares a bucket with a and sits out UNUSED_AT (torch skips a parameter
    with no gradient: no momentum step, no decay), c is added with add_param_group after construction (stepped from
    then on, torch's contract) and, at N = 2, goes to the rank that owns only b. A flat buffer of another dtype than
    its parameters changes their dtype."""
    import torch

    class Toy2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(6)
            for name, n in (("a", 31), ("b", 2), ("c", 5)):
                setattr(self, name, torch.nn.Parameter(torch.randn(n, generator=g, dtype=torch.float64)))

        def forward(self, x, use_b=True):
            y = x[:, :31] @ self.a + x[:, 33:] @ self.c
            return y + x[:, 31:33] @ self.b if use_b else y
    return Toy2()


UNUSED_AT = 2  # toy2's b gets no gradient in this step, after two steps that built its momentum


def _ddp_reference(model, env, find_unused=False):
    import torch

    from labs.common import dist as cdist
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=cdist.ddp_device_ids(env.device),
                                                     find_unused_parameters=find_unused)


def equivalence(make_opt, env, batches, steps=4, replicated_grads=False, keep=None) -> dict:
    """The learner's optimizer vs torch DDP + SGD on tiny (perturbed), on the odd-sized toy and on toy2 (float64, a
    parameter unused in one step, a group added after construction), with a schedule. keep(key, value): the weights
    after each step, for the reference's own run to judge (checker/labs/_crosscheck.py)."""
    import torch
    import torch.distributed as dist

    out, diffs = {}, []
    for name, build, data in (("tiny", lambda: perturb(tiny_model(0), 1).to(env.device), batches),
                              ("toy", lambda: toy().to(env.device), _toy_batches(env, steps)),
                              ("toy2", lambda: toy2().to(env.device), _toy_batches(env, steps, 38, torch.float64))):
        model = build()
        ref = copy.deepcopy(model)
        dtypes = {n: p.dtype for n, p in model.named_parameters()}
        ddp = _ddp_reference(ref, env, find_unused=name == "toy2")
        mine = _ddp_reference(model, env, name == "toy2") if replicated_grads else model  # ZeRO-1: averaged grads
        late = [model.c] if name == "toy2" else []  # handed over after construction, with add_param_group
        early = [p for p in model.parameters() if all(p is not q for q in late)]
        opt = make_opt(groups(model) if name == "tiny" else early)
        ref_opt = torch.optim.SGD(groups(ref) if name == "tiny" else list(ref.parameters()), **SGD)
        if late:
            opt.add_param_group({"params": late})
        changed = [f"{n} {dtypes[n]} -> {p.dtype}" for n, p in model.named_parameters() if p.dtype != dtypes[n]]
        if changed:  # the model's own tensors changed type: no step can match torch's
            out[name] = {"max_diff": 0.0, "in_sync": True, "dtype_changed": changed}
            continue
        lam = lambda s: 1.0 / (1 + s)  # noqa: E731  a changing LR: the scheduler edits the outer param_groups
        scheds = [torch.optim.lr_scheduler.LambdaLR(o, lam) for o in (opt, ref_opt)]
        for i, batch in enumerate(data[:steps]):
            for m, o in ((mine, opt), (ddp, ref_opt)):
                o.zero_grad(set_to_none=True)
                if name == "tiny":
                    loss = m(*batch)[1]
                else:
                    loss = (m(batch, use_b=i != UNUSED_AT) if name == "toy2" else m(batch)).square().mean()
                loss.backward()
                o.step()
            for s in scheds:
                s.step()
            per = {n: (p - q).abs().max().item() for (n, p), q in zip(model.named_parameters(), ref.parameters())}
            diffs.append(max(per.values()))
            if keep is not None:
                keep(f"{name}.step{i}", [p.detach() for p in model.parameters()])
        digests = [None] * env.world_size
        dist.all_gather_object(digests, digest(model.named_parameters()))
        out[name] = {"max_diff": max(diffs[-steps:]), "in_sync": len(set(digests)) == 1, "worst": max(per, key=per.get)}
    return {"max_diff": max(v["max_diff"] for v in out.values()), "in_sync": all(v["in_sync"] for v in out.values()),
            "dtype_changed": [f"{k}: {c}" for k, v in out.items() for c in v.get("dtype_changed", [])], "parts": out}


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


# (sizes, N) where dealing in the given order, not largest first, leaves one rank heavier: the largest tensor last;
# then ties, in size and in load, where only the contract's rule (equal sizes in their given order, a tie in load to
# the lowest rank) gives its owners: [4, 4, 2, 2] at N = 2 is [0, 1, 0, 1], ties to the highest rank [1, 0, 1, 0]
PARTITIONS = (([1, 1, 1, 3], 2), ([2, 7, 3, 2, 4, 9, 12], 3), ([5, 1, 4, 2, 3, 2, 8, 16], 2), ([4, 4, 2, 2], 2),
              ([3, 5, 3, 5, 1], 3))


def greedy(sizes, n) -> list[int]:
    """The contract's owners: largest first (equal sizes in their given order), each to the least-loaded rank (the
    lowest on a tie)."""
    load, owners = [0] * n, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        owners[i] = load.index(min(load))
        load[owners[i]] += sizes[i]
    return owners


def partitions(seam) -> list[dict]:
    """partition() on sizes dealt in an unhelpful order and on ties: its owners and the heaviest rank's elements vs
    the contract's greedy."""
    rows = []
    for sizes, n in PARTITIONS:
        want_owners = greedy(sizes, n)
        owners = list(seam.partition(list(sizes), n))
        want, got = [0] * n, [0] * n
        for s, r, w in zip(sizes, owners, want_owners):
            got[r] += s
            want[w] += s
        rows.append({"sizes": list(sizes), "n": n, "loads": got, "greedy": want, "owners": owners,
                     "greedy_owners": want_owners, "ok": len(owners) == len(sizes) and max(got) <= max(want),
                     "same": owners == want_owners})
    return rows


def zero1(seam, env, batches, comm, keep=None) -> dict:
    """Equivalence (SGD), then AdamW on tiny: local groups per outer group, state bytes held after a step and the
    bytes the step itself sends (DDP's all-reduce is not in it: the gradients here are this rank's own)."""
    import torch

    from labs.common.optim import ADAMW
    from labs.instruments.comm_bytes import sent

    out = equivalence(lambda params: seam.ShardedOptimizer(params, torch.optim.SGD, **SGD), env, batches,
                      replicated_grads=True, keep=keep)
    out["kwargs"] = kwargs_reach(lambda params, cls: seam.ShardedOptimizer(params, cls, **SGD), env)
    model = tiny_model(0).to(env.device)  # memory: AdamW, after a step
    opt = seam.ShardedOptimizer(groups(model), torch.optim.AdamW, lr=3e-3, **ADAMW)
    out["groups"] = {"outer": len(opt.param_groups), "local": len(opt.optim.param_groups)}
    for x, y in batches[:1]:
        opt.zero_grad(set_to_none=True)
        model(x, y)[1].backward()
        comm.start()
        opt.step()
        records = comm.stop()
    ops = {}
    for op, _, b in records:
        ops[op] = ops.get(op, 0) + b
    out.update(state_bytes=storage_bytes(v for s in opt.optim.state.values() for v in s.values() if torch.is_tensor(v)),
               psi=sum(p.numel() for p in model.parameters()), world_size=env.world_size, partitions=partitions(seam),
               dealt=_dealt(groups(model), env),
               sent=sent(records), sent_by_op=ops, calls=len(records))
    return out


def _dealt(param_groups, env) -> int:
    """Elements the contract's partition deals this rank: at N = 2 tiny's tensors split within 0.1% of Ψ/2; at N = 3
    whole tensors cannot, and each rank's state is 8 B x its own share."""
    sizes = [p.numel() for g in param_groups for p in g["params"]]
    return sum(s for s, r in zip(sizes, greedy(sizes, env.world_size)) if r == env.rank)


def padding(model, world_size: int) -> list[int]:
    """Zeros of padding behind each flat buffer the model's parameters are views of: the buffer's elements minus its
    parameters' (at most N - 1 each, the contract)."""
    held = {}
    for p in model.parameters():
        s = p.untyped_storage()
        n, used = held.get(s.data_ptr(), (s.nbytes() // p.element_size(), 0))
        held[s.data_ptr()] = (n, used + p.numel())
    return [n - used for n, used in held.values()]


def zero2(seam, env, batches, comm, keep=None) -> dict:
    """Equivalence (SGD), then AdamW: bytes held after a step, bytes sent in one step, when its handles were waited."""
    import torch

    from checker.labs._handles import HandleLog
    from labs.common.optim import ADAMW
    from labs.instruments.comm_bytes import sent

    out = equivalence(lambda params: seam.Zero2Optimizer(params, torch.optim.SGD, bucket_cap_mb=BUCKET_MB, **SGD),
                      env, batches, keep=keep)
    out["kwargs"] = kwargs_reach(lambda params, cls: seam.Zero2Optimizer(params, cls, bucket_cap_mb=BUCKET_MB, **SGD),
                                 env)
    model = tiny_model(0).to(env.device)
    psi = sum(p.numel() for p in model.parameters())
    opt = seam.Zero2Optimizer(groups(model), torch.optim.AdamW, bucket_cap_mb=BUCKET_MB, lr=3e-3, **ADAMW)
    steps, log = [], HandleLog(comm)
    try:
        for x, y in batches[:2]:  # the second step is the one counted: nothing left over from construction
            comm.start()
            opt.zero_grad(set_to_none=True)
            loss = model(x, y)[1]
            log.mark("backward")
            loss.backward()
            log.mark("step")
            opt.step()
            log.mark("end")
            steps.append(comm.stop())
    finally:
        log.close()
    inner = opt.optim
    moments = storage_bytes(v for s in inner.state.values() for v in s.values() if torch.is_tensor(v))
    grads = storage_bytes([p.grad for p in model.parameters()]
                          + [p.grad for g in inner.param_groups for p in g["params"]])
    last = steps[-1]
    ops = {}
    for op, _, b in last:
        ops[op] = ops.get(op, 0) + b
    out.update(psi=psi, world_size=env.world_size, moments=moments, grads=grads, sent=sent(last),
               sent_by_op=ops, calls=len(last), handles=log.phases("backward", "step", "end"),
               padding=padding(model, env.world_size) + exact_bucket_padding(seam, env))
    return out


def exact_bucket_padding(seam, env) -> list[int]:
    """Padding behind a bucket already a multiple of N (4N elements): none is the contract. Tiny's buckets are
    multiples of 2 but rarely of 3, so without this a buffer rounded up to the *next* multiple passes at N = 3."""
    import torch

    exact = torch.nn.Module()  # ones, not a random init: this draws nothing from the run's random streams
    exact.w = torch.nn.Parameter(torch.ones(4 * env.world_size, device=env.device))
    seam.Zero2Optimizer(exact.parameters(), torch.optim.SGD, bucket_cap_mb=BUCKET_MB, **SGD)
    return padding(exact, env.world_size)


def memory_model(seam) -> dict:
    """The learner's bytes_per_rank over a grid (every strategy, precision and optimizer; N = 1, 2, 8; Ψ = 1000):
    {"strategy|precision|optimizer|N": {weights, grads, optimizer, total}}, for the checker's own table."""
    out = {}
    for strategy in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP"):
        for precision in ("fp32", "bf16"):
            for optimizer in ("AdamW", "SGD+momentum", "SGD"):
                for n in (1, 2, 8):
                    got = seam.bytes_per_rank(1000, n, strategy, precision, optimizer)
                    out[f"{strategy}|{precision}|{optimizer}|{n}"] = {k: float(got[k]) for k in
                                                                       ("weights", "grads", "optimizer", "total")}
    return out
