"""The hand-written ZeRO-1/ZeRO-2 optimizers and bucketed DDP held to what a user of torch's own expects: the
behaviours torch's ZeroRedundancyOptimizer and DistributedDataParallel tests assert (their contracts restated
here on CPU/gloo, not their code): a bare tensor is a TypeError, a group added later is stepped, step's keyword
arguments reach the wrapped optimizer, the whole state can be gathered on one rank, a parameter that got no
gradient is not stepped, and several backwards before a synchronisation give the mean of the summed gradients."""
import json

import pytest

pytestmark = pytest.mark.timeout(180)


def _ranks(rank, world, store, out):
    import copy

    import torch
    import torch.distributed as dist

    from solutions.lab2_ddp.bucketed import BucketedDDP
    from solutions.lab3_sharding.zero1 import ShardedOptimizer
    from solutions.lab3_sharding.zero2 import Zero2Optimizer

    dist.init_process_group("gloo", store=dist.FileStore(str(store), world), rank=rank, world_size=world)
    res = {}

    def two_layers(seed=0):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))

    def data(k):  # the same on every rank: a rank's gradient is then the ranks' mean (ZeRO-1's input)
        g = torch.Generator().manual_seed(k)
        return torch.randn(4, 6, generator=g)

    for name, make in (("zero1", lambda ps, cls=torch.optim.SGD, **kw: ShardedOptimizer(ps, cls, **kw)),
                       ("zero2", lambda ps, cls=torch.optim.SGD, **kw: Zero2Optimizer(ps, cls, **kw))):
        r = res[name] = {}
        try:
            make(torch.ones(3, requires_grad=True), lr=0.1)
            r["bare_tensor"] = "accepted"
        except TypeError:
            r["bare_tensor"] = "TypeError"
        # a group added after construction, with its own lr, is stepped as torch's SGD steps it
        model, ref = two_layers(), two_layers()
        opt = make(list(model[0].parameters()), lr=0.1)
        opt.add_param_group({"params": list(model[2].parameters()), "lr": 0.05})
        ref_opt = torch.optim.SGD(list(ref[0].parameters()), lr=0.1)
        ref_opt.add_param_group({"params": list(ref[2].parameters()), "lr": 0.05})
        for k in range(3):
            for m, o in ((model, opt), (ref, ref_opt)):
                o.zero_grad()
                m(data(k)).square().mean().backward()
                o.step()
        r["added_group_diff"] = max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))

        class Recording(torch.optim.SGD):
            def step(self, closure=None, **kwargs):
                self.seen = kwargs
                return super().step(closure)
        m = two_layers()
        opt = make(list(m.parameters()), Recording, lr=0.1)
        opt.zero_grad()
        m(data(0)).sum().backward()
        opt.step(note="forwarded")
        r["kwargs"] = getattr(opt.optim, "seen", None)

    # ZeRO-1: the whole AdamW state gathered on rank 0 equals one process's AdamW over the same parameters
    model, ref = two_layers(1), two_layers(1)
    opt = ShardedOptimizer(list(model.parameters()), torch.optim.AdamW, lr=0.01)
    ref_opt = torch.optim.AdamW(list(ref.parameters()), lr=0.01)
    for k in range(2):
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            m(data(k)).square().mean().backward()
            o.step()
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        got, want = opt.consolidated, ref_opt.state_dict()
        res["consolidated"] = {"keys": sorted(got["state"]) == sorted(want["state"]),
                               "diff": max((got["state"][i][k] - want["state"][i][k]).abs().max().item()
                                           for i in want["state"] for k in ("exp_avg", "exp_avg_sq")),
                               "groups": [g["params"] for g in got["param_groups"]]
                               == [g["params"] for g in want["param_groups"]]}
    else:
        res["consolidated"] = {"none_here": opt.consolidated is None}

    # ZeRO-2: a parameter no forward used gets no gradient, so AdamW's weight decay must not touch it
    model = two_layers(2)
    unused = torch.nn.Parameter(torch.ones(7))
    opt = Zero2Optimizer([*model.parameters(), unused], torch.optim.AdamW, lr=0.01, weight_decay=0.1)
    opt.zero_grad()
    model(data(0)).sum().backward()
    opt.step()
    res["unused_untouched"] = bool(torch.equal(unused.detach(), torch.ones(7)))

    # bucketed DDP: two backwards, no no_sync, one synchronisation: every .grad is the ranks' mean of g1 + g2
    model = two_layers(3)
    ref = copy.deepcopy(model)
    ddp = BucketedDDP(model, bucket_cap_mb=25)
    xs = [data(10 + 2 * r + k) for r in range(world) for k in range(2)]  # rank r's two micro-batches
    for k in range(2):
        ddp(xs[2 * rank + k]).square().mean().backward()
    ddp.finish_gradient_synchronization()
    for x in xs:
        ref(x).square().mean().backward()
    res["multi_backward_diff"] = max((p.grad - q.grad / world).abs().max().item()
                                     for p, q in zip(model.parameters(), ref.parameters()))
    dist.barrier()
    dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(res, f)


def _spawn(rank, world, store, out):
    import os

    import torch
    torch.set_num_threads(1)
    _ranks(rank, world, store, out)
    os._exit(0)  # the result is written; a gloo thread must not abort the rank at interpreter shutdown


def test_the_hand_written_optimizers_keep_torchs_contracts(tmp_path):
    import torch.multiprocessing as mp

    world = 2
    mp.start_processes(_spawn, args=(world, tmp_path / "store", tmp_path / "out"), nprocs=world, start_method="spawn")
    res = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(world)]
    for r in res:
        for name in ("zero1", "zero2"):
            assert r[name]["bare_tensor"] == "TypeError", name
            assert r[name]["added_group_diff"] < 1e-6, (name, r[name])
            assert r[name]["kwargs"] == {"note": "forwarded"}, (name, r[name])
        assert r["unused_untouched"]
        assert r["multi_backward_diff"] < 1e-6, r["multi_backward_diff"]
    assert res[0]["consolidated"] == {"keys": True, "diff": pytest.approx(0, abs=1e-6), "groups": True}
    assert res[1]["consolidated"] == {"none_here": True}
