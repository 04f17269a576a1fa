"""Lab 10's worker side: the unit, expert-parallel, EP x DP and resume runs, each computing the checker's own
reference (ref.py) before the learner's code is imported and counting beneath it (measure.py)."""
from __future__ import annotations

from checker import seams
from checker.labs import _crosscheck
from checker.labs._common import digest, probe, tiny_model
from checker.labs._held_save import HeldSave
from checker.labs.lab10 import AUX_RTOL, LAB, TOL
from checker.labs.lab10.measure import OpCounter
from checker.labs.lab10.shapes import BALANCE, CAPACITY_CASES, EP, EPDP, MOE, RESUME, ROUTER_CASES, SEED


def task_probe(ctx, target):
    return probe(LAB, target)


def _gen(seed):
    import torch

    return torch.Generator().manual_seed(seed)


def _diff(got, want) -> float:
    if got is None or want is None:
        return float("inf") if (got is None) != (want is None) else 0.0
    return (got.detach().float() - want.detach().float()).abs().max().item() if got.shape == want.shape \
        else float("inf")


def _keep(ctx, check, key, values, rtol=0.0, atol=0.0):
    """The learner's values at this point, for the reference's own run to judge (checker/labs/_crosscheck.py),
    allowed twice the check's tolerance (both sides within it of the same deterministic truth). A value missing
    (None) is kept by neither side: the check fails on it already, and the reference's run finds nothing kept."""
    if all(v is not None for v in values):
        values = [v.detach() if hasattr(v, "detach") else v for v in values]
        _crosscheck.keep(ctx, check, key, values, rtol=2 * rtol, atol=2 * atol)


def _router_cases(cases, seed):
    """Scores with ties in rows 0 and 1, a selection bias on all cases but the first, bf16 scores in the last, an
    upstream gradient: the checker's."""
    import torch

    from checker.labs.lab10 import ref

    gen, out = _gen(seed), []
    for i, (t, e, k) in enumerate(cases):
        s = torch.randn(t, e, generator=gen)
        s[0] = 0.5  # every expert ties
        s[1, :2] = s[1].max() + 1  # experts 0 and 1 tie for first
        bias = torch.randn(e, generator=gen) * 0.05 if i else None  # the first case without, the others with one
        if i == len(cases) - 1:
            s = s.to(torch.bfloat16)  # weights are float32 whatever the scores' dtype
        g = torch.randn(t, k, generator=gen)
        leaf = s.clone().requires_grad_()
        G, ids, _, _ = ref.gate(leaf, k, float(e), bias)  # factor E: T k slots, none dropped
        w = torch.stack([G[i_, row] for i_, row in enumerate(ids)])
        grad, = torch.autograd.grad((w * g).sum(), leaf)
        out.append((s, k, bias, g, ids, w.detach(), grad))
    return out


def _plan_cases(seed):
    """(dense, expert, E, W, budget): budgets on an ep's exact bytes, between two, under every one."""
    cases = []
    for i, (E, W) in enumerate(((8, 8), (6, 12), (8, 6), (16, 4))):
        dense, expert = 1000 + 37 * (seed % 7) + i, E * (7000 + 11 * (seed % 5))
        eps = [e for e in range(1, W + 1) if W % e == 0 and E % e == 0]
        by = [16 * (dense + expert // e) for e in eps]
        budget = (by[1], (by[1] + by[2]) // 2 if len(by) > 2 else by[-1] - 1, by[-1] - 1, by[0] + 5)[i]
        cases.append((dense, expert, E, W, budget))
    return cases


def _plan_reference(dense, expert, E, W, budget):
    eps = [e for e in range(1, W + 1) if W % e == 0 and E % e == 0]
    by = {e: 16 * (dense + expert // e) for e in eps}
    ep = next((e for e in eps if by[e] <= budget), eps[-1])
    return {"ep": ep, "dp": W // ep, "experts_per_rank": E // ep, "bytes": by[ep], "fits": by[ep] <= budget,
            "bytes_by_ep": {str(e): b for e, b in by.items()}}


def task_units(ctx, target, seed=SEED, router=ROUTER_CASES, cap_cases=CAPACITY_CASES, moe=MOE, balance=BALANCE,
               resume=RESUME):
    import torch

    from checker.labs.lab10 import ref

    torch.set_num_threads(1)
    rcases = _router_cases(router, seed)  # every reference value before the learner's code is imported
    gen = _gen(seed + 1)
    skew = torch.randn(200, 8, generator=gen) + torch.linspace(2.0, 0.0, 8)
    sk_ids = ref.choose(torch.softmax(skew, -1), 2)
    sk_cap = ref.capacity(200, 2, 8, 1.0)
    sk_keep = ref.keep(sk_ids, 8, sk_cap)
    aux_scores = torch.randn(50, 5, generator=gen)
    aux_scores[:, 4] -= 10.0  # the last expert is never chosen: its count is 0, not missing
    aux_leaf = aux_scores.clone().requires_grad_()
    aux_probs = torch.softmax(aux_leaf, -1)
    aux_ids = ref.choose(aux_probs, 2)
    aux_want = ref.aux_loss(aux_probs, aux_ids)
    aux_grad, = torch.autograd.grad(aux_want, aux_leaf)
    h, E, k, f = moe["hidden"], moe["experts"], moe["k"], moe["ffn"]
    layers = []
    for case in range(2):  # without, then with a selection bias
        m = ref.RefMoE.make(h, E, k, f, moe["factor"], gen)
        if case:
            m.bias.copy_(torch.randn(E, generator=gen) * 0.05)
            m.bias[-1] = -1.0  # the last expert starved: no token chooses it
        x = torch.randn(moe["batch"], moe["seq"], h, generator=gen)
        g = torch.randn(x.shape, generator=gen)  # never torch's global stream: the reference's run must draw the same
        xl = x.clone().requires_grad_()
        y = m(xl)
        y.backward(g)
        kept = ref.keep(ref.choose(torch.softmax(x.reshape(-1, h) @ m.router.weight.t(), -1), k, m.bias), E,
                        ref.capacity(x.numel() // h, k, E, moe["factor"]))
        layers.append(dict(state={n: t.detach().clone() for n, t in m.state_dict().items()}, x=x, g=g, y=y.detach(),
                           grads={"input": xl.grad, **{n: p.grad.clone() for n, p in m.named_parameters()}},
                           aux=m.aux_loss.item(), counts=m.counts.tolist(),
                           dropped=sum(not kk for row in kept for kk in row)))
    bx = torch.randn(balance["tokens"], balance["hidden"], generator=gen)
    b_router = torch.randn(balance["experts"], balance["hidden"], generator=gen) * 0.3
    bx[:, 0] = 1.0  # a constant feature: its router column acts as a per-expert offset, skewed to the low experts
    b_router[:, 0] += torch.linspace(balance["skew"], 0, balance["experts"])
    b_probs = torch.softmax(bx @ b_router.t(), -1)

    seam = seams.load(LAB, target)
    out = ctx.partial

    def router_part():
        rows = []
        for i, (s, kk, bias, g, ids, w, grad) in enumerate(rcases):
            leaf = s.clone().requires_grad_()
            got_ids, got_w = seam.route(leaf, kk, bias)
            got_ids = got_ids.tolist()
            bad = next(((t, got_ids[t], ids[t]) for t in range(len(ids)) if got_ids[t] != ids[t]), None)
            gw = torch.autograd.grad((got_w.float() * g).sum(), leaf, allow_unused=True)[0] if got_w.requires_grad \
                else None
            _keep(ctx, "router_equivalence", f"case{i}", [torch.tensor(got_ids), got_w, gw], atol=TOL)  # ids exact
            rows.append({"shape": list(s.shape), "k": kk, "bias": bias is not None, "ids_bad": bad,
                         "weights": _diff(got_w, w), "grad": _diff(gw, grad) if gw is not None else None,
                         "dtype": str(got_w.dtype), "scores": str(s.dtype)})
        return rows
    out["router"], out["router_error"] = ctx.attempt(router_part)

    def capacity_part():
        caps = [[list(c), int(seam.capacity(*c)), ref.capacity(*c)] for c in cap_cases]
        keep = seam.keep_mask(torch.tensor(sk_ids), 8, sk_cap).tolist()
        _keep(ctx, "capacity_drops", "caps", [got for _, got, _ in caps])  # both exact: atol 0
        _keep(ctx, "capacity_drops", "keep", [torch.tensor(keep, dtype=torch.bool)])
        per_expert = lambda kp: [sum(1 for row, ks in zip(sk_ids, kp) for e_, kk in zip(row, ks)  # noqa: E731
                                     if e_ == e and not kk) for e in range(8)]
        wrong = [[t, j] for t in range(len(sk_ids)) for j in range(2) if bool(keep[t][j]) != sk_keep[t][j]]
        return {"caps": caps, "wrong": wrong[:3], "n_wrong": len(wrong), "cap": sk_cap,
                "dropped": per_expert(keep), "want_dropped": per_expert(sk_keep)}
    out["capacity"], out["capacity_error"] = ctx.attempt(capacity_part)

    def aux_part():
        leaf = aux_scores.clone().requires_grad_()
        probs = torch.softmax(leaf, -1)
        got = seam.load_balancing_loss(probs, torch.tensor(aux_ids), 5)
        grad = torch.autograd.grad(got, leaf, allow_unused=True)[0] if got.requires_grad else None
        _keep(ctx, "aux_loss", "value", [got], rtol=AUX_RTOL)
        _keep(ctx, "aux_loss", "grad", [grad], atol=TOL)
        return {"value": got.item(), "want": aux_want.item(), "grad": None if grad is None else _diff(grad, aux_grad),
                "grad_norm": aux_grad.norm().item()}
    out["aux"], out["aux_error"] = ctx.attempt(aux_part)

    def moe_part():
        rows = []
        for i, L in enumerate(layers):
            torch.manual_seed(seed)
            m = seam.MoE(h, E, k, f, moe["factor"])
            m.load_state_dict(L["state"])
            xl = L["x"].clone().requires_grad_()
            y = m(xl)
            y.backward(L["g"])
            named = dict(m.named_parameters())
            diffs = {"output": _diff(y, L["y"]), "input": _diff(xl.grad, L["grads"]["input"])}
            diffs.update({n: _diff(named[n].grad, L["grads"][n]) for n in ("router.weight", "w1", "w2")})
            _keep(ctx, "moe_equivalence", f"layer{i}", [y, xl.grad, *(named[n].grad if n in named else None
                                                                       for n in ("router.weight", "w1", "w2"))],
                  atol=TOL)
            _keep(ctx, "moe_equivalence", f"layer{i}.aux", [float(m.aux_loss)], rtol=AUX_RTOL)
            _keep(ctx, "moe_equivalence", f"layer{i}.counts", [[int(c) for c in m.counts]])  # exact
            rows.append({"diffs": diffs, "aux": float(m.aux_loss), "want_aux": L["aux"],
                         "counts": [int(c) for c in m.counts], "want_counts": L["counts"], "dropped": L["dropped"]})
        return rows
    out["moe"], out["moe_error"] = ctx.attempt(moe_part)

    def balance_part():
        exact = []  # counts whose mean is fractional, or met exactly by some experts
        for i, counts in enumerate(([3, 2, 2, 2], [4, 2, 3, 3], [0, 5, 1, 2, 7])):
            c = torch.tensor(counts)
            bias = torch.full((len(counts),), 0.25)
            seam.update_bias(bias, c.clone(), 0.5)
            _keep(ctx, "ep_balance", f"exact{i}", [bias], atol=5e-7)  # rounded to 6 decimals, then exact
            mean = sum(counts) / len(counts)
            want = [0.25 + 0.5 * ((mean > x) - (mean < x)) for x in counts]
            exact.append({"counts": counts, "got": [round(float(b), 6) for b in bias], "want": want})
        res = {"exact": exact}
        for label, update in (("off", False), ("on", True)):
            bias, trace = torch.zeros(balance["experts"]), []
            for _ in range(balance["steps"]):
                # the checker's own routing of the fixed tokens, with the bias as the learner's updates left it
                ids = ref.choose(b_probs, balance["k"], bias.clone())
                counts = torch.bincount(torch.tensor(ids).flatten(), minlength=balance["experts"])
                trace.append(counts.max().item() / counts.float().mean().item())
                if update:
                    seam.update_bias(bias, counts.clone(), balance["gamma"])
            res[label] = {"first": trace[0], "tail": max(trace[-10:]), "min": min(trace)}  # sign steps oscillate
        return res
    out["balance"], out["balance_error"] = ctx.attempt(balance_part)

    def plan_part():
        model = tiny_model(seed)
        model = seam.apply_moe(model, resume["experts"], resume["k"], resume["factor"]) or model
        params = {id(p): (n, p.numel()) for n, p in model.named_parameters()}.values()
        want_expert = sum(k for n, k in params if n.endswith((".w1", ".w2")))
        want = [sum(k for _, k in params) - want_expert, want_expert]
        got = [int(x) for x in seam.count_params(model)]
        plans = []
        for case in _plan_cases(seed):
            p = dict(seam.plan_experts(*case))
            p["bytes_by_ep"] = {str(k): int(v) for k, v in dict(p.get("bytes_by_ep", {})).items()}
            p = {k: (int(v) if k != "fits" and not isinstance(v, dict) else v) for k, v in p.items()
                 if k in ("ep", "dp", "experts_per_rank", "bytes", "fits", "bytes_by_ep")}
            p["fits"] = bool(p.get("fits"))
            plans.append({"case": list(case), "got": p, "want": _plan_reference(*case)})
        two = dict(seam.plan_experts(*got, resume["experts"], 2, 1 << 62)).get("bytes_by_ep", {})
        _keep(ctx, "ep_plan", "plans", [got, [p["got"] for p in plans], int(two.get(2, two.get("2", -1)))])  # exact
        return {"count": got, "want_count": want, "plans": plans, "at_ep2": int(two.get(2, two.get("2", -1)))}
    out["plan"], out["plan_error"] = ctx.attempt(plan_part)

    def grouped_part():
        res = {}
        for t in (100, 300):
            ids = torch.tensor(ref.choose(torch.softmax(torch.randn(t, 8, generator=gen) + torch.linspace(1, 0, 8), -1),
                                          2))
            c = OpCounter()
            with c.mode:
                seam.keep_mask(ids, 8, ref.capacity(t, 2, 8, 1.0))
            res[f"keep_ops_{t}"] = c.ops
        torch.manual_seed(seed)
        m = seam.MoE(h, E, k, f, moe["factor"])
        m.load_state_dict(layers[0]["state"])
        for t in (40, 120):
            x = torch.randn(t, h, generator=gen)
            c = OpCounter()
            with torch.no_grad(), c.mode:
                m(x)
            res[f"moe_matmuls_{t}"] = c.matmuls
        res["experts"] = E
        return res
    out["grouped"], out["grouped_error"] = ctx.attempt(grouped_part)
    return out


def _ep_reference(ep, n, seed):
    """Every rank's tokens, upstream gradient and the reference's results for each, and the full weights."""
    import torch

    from checker.labs.lab10 import ref

    gen = _gen(seed)
    h, E = ep["hidden"], ep["per_rank_experts"] * n
    m = ref.RefMoE.make(h, E, ep["k"], ep["ffn"], ep["factor"], gen)
    with torch.no_grad():
        m.bias[-1] = -1.0  # the last expert (the last rank's) receives no row: its counts are 0, not missing
    state = {k: t.detach().clone() for k, t in m.state_dict().items()}
    ranks, w1g, w2g = [], torch.zeros_like(m.w1), torch.zeros_like(m.w2)
    for _ in range(n):
        x = torch.randn(ep["tokens"], h, generator=gen)
        g = torch.randn(x.shape, generator=gen)
        m.zero_grad()
        xl = x.clone().requires_grad_()
        y, _, ids, kept, _ = ref.moe_forward(xl, m.router.weight, m.w1, m.w2, ep["k"], ep["factor"], m.bias)
        y.backward(g)
        w1g += m.w1.grad
        w2g += m.w2.grad
        ranks.append(dict(x=x, g=g, y=y.detach(), dx=xl.grad, drouter=m.router.weight.grad.clone(), ids=ids,
                          kept=kept))
    return state, ranks, w1g, w2g


def _ep_rows(ranks, n, per):
    """Per rank: (kept rows it sends to other ranks' experts, rows it receives from other ranks)."""
    out_rows, in_rows = [0] * n, [0] * n
    for r, rk in enumerate(ranks):
        for row, ks in zip(rk["ids"], rk["kept"]):
            for e, kk in zip(row, ks):
                if kk and e // per != r:
                    out_rows[r] += 1
                    in_rows[e // per] += 1
    return out_rows, in_rows


def task_ep(ctx, target, ep=EP, seed=SEED):
    import torch

    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    env = cdist.init(timeout_s=20)
    comm = CommBytes()  # before the learner's code is imported: every spelling of all_to_all reaches it
    n, r, per = env.world_size, env.rank, ep["per_rank_experts"]
    state, ranks, w1g, w2g = _ep_reference(ep, n, seed)
    rows_out, rows_in = _ep_rows(ranks, n, per)
    mine = ranks[r]
    seam = seams.load(LAB, target)
    out = ctx.partial
    E = per * n
    out.update(world=n, experts=E, hidden=ep["hidden"], tokens=ep["tokens"], rows_out=rows_out[r], rows_in=rows_in[r],
               dropped=sum(not kk for row in mine["kept"] for kk in row))

    def equivalence():
        torch.manual_seed(seed)
        m = seam.MoE(ep["hidden"], E, ep["k"], ep["ffn"], ep["factor"])
        m.load_state_dict(state)
        layer = seam.expert_parallel(m, None)
        named = dict(layer.named_parameters())
        lo, hi = r * per, (r + 1) * per
        shapes = {n_: list(named[n_].shape) if n_ in named else None for n_ in ("w1", "w2")}
        if shapes["w1"] != [per, ep["hidden"], ep["ffn"]] or shapes["w2"] != [per, ep["ffn"], ep["hidden"]]:
            return {"shapes": shapes}
        sliced = max(_diff(named["w1"], state["w1"][lo:hi]), _diff(named["w2"], state["w2"][lo:hi]))
        xl = mine["x"].clone().requires_grad_()
        comm.start()
        ops = OpCounter()
        with ops.mode:
            y = layer(xl)
        fwd = comm.stop()
        comm.start()
        y.backward(mine["g"])
        bwd = comm.stop()
        _keep(ctx, "ep_equivalence", "weights", [named["w1"], named["w2"]])  # the slices, exact
        _keep(ctx, "ep_equivalence", "grads", [y, xl.grad, named["router.weight"].grad if "router.weight" in named
                                               else None, named["w1"].grad, named["w2"].grad], atol=TOL)
        diffs = {"output": _diff(y, mine["y"]), "input": _diff(xl.grad, mine["dx"]),
                 "router.weight": _diff(named["router.weight"].grad, mine["drouter"]),
                 "w1": _diff(named["w1"].grad, w1g[lo:hi]), "w2": _diff(named["w2"].grad, w2g[lo:hi])}
        return {"shapes": shapes, "sliced": sliced, "diffs": diffs, "fwd": [list(x) for x in fwd],
                "bwd": [list(x) for x in bwd], "matmuls": ops.matmuls}
    out["equiv"], out["equiv_error"] = ctx.attempt(equivalence)
    if out["equiv_error"]:
        return out  # a peer may be inside a collective: skip teardown's barrier
    comm.uninstall()
    cdist.teardown()
    return out


def task_epdp(ctx, target, epdp=EPDP, seed=SEED):
    import torch
    import torch.distributed as dist

    from checker.labs.lab10 import ref
    from labs.common import dist as cdist
    from labs.common.data import TokenFile, ensure_corpus

    env = cdist.init(timeout_s=20)
    n_dp, n_ep, E = epdp["dp"], epdp["ep"], epdp["experts"]
    ep_groups = [dist.new_group([d * n_ep + e for e in range(n_ep)]) for d in range(n_dp)]  # every rank makes each
    dp_groups = [dist.new_group([d * n_ep + e for d in range(n_dp)]) for e in range(n_ep)]
    d, e = divmod(env.rank, n_ep)
    world = n_dp * n_ep
    # one process's step on every rank's batch, before the learner's code is imported
    gen = _gen(seed)
    ref_model = tiny_model(seed)
    for block in ref_model.blocks:
        block.mlp = ref.RefMoE.make(ref_model.cfg.n_embd, E, epdp["k"], 4 * ref_model.cfg.n_embd, epdp["factor"], gen)
        block.mlp.bias.copy_(torch.randn(E, generator=gen) * 0.01)
    ref_model = ref_model.to(env.device)
    state = {k: t.detach().clone() for k, t in ref_model.state_dict().items()}
    s = ref_model.cfg.block_size
    data = TokenFile.open(ensure_corpus(ref_model.cfg.vocab_size))
    b = epdp["batch"]
    batches = [data.batch(list(range(seed % 5 + r * b, seed % 5 + (r + 1) * b)), s, env.device) for r in range(world)]
    layers = [blk.mlp for blk in ref_model.blocks]
    total, counts = 0.0, [torch.zeros(E, dtype=torch.long) for _ in layers]
    for x, y in batches:
        _, loss = ref_model(x, y)
        obj = (loss + epdp["aux_coef"] * sum(m.aux_loss for m in layers)) / world
        obj.backward()
        total += obj.item()
        for c, m in zip(counts, layers):
            c += m.counts
    want_grads = {k: p.grad.clone() for k, p in ref_model.named_parameters()}
    torch.optim.SGD(ref_model.parameters(), lr=epdp["lr"]).step()
    for c, m in zip(counts, layers):
        m.bias += epdp["gamma"] * torch.sign(c.float().mean() - c.float())
    want = {k: t.detach().clone() for k, t in ref_model.state_dict().items()}
    per = E // n_ep
    seam = seams.load(LAB, target)
    out = ctx.partial

    def expected(name, t):
        return t[e * per:(e + 1) * per] if name.endswith((".w1", ".w2")) else t

    def step():
        model = tiny_model(seed).to(env.device)
        model = seam.apply_moe(model, E, epdp["k"], epdp["factor"]) or model
        model.load_state_dict(state)
        model = seam.apply_expert_parallel(model, ep_groups[d]) or model
        loss = float(seam.ep_dp_step(model, torch.optim.SGD(model.parameters(), lr=epdp["lr"]), batches[env.rank],
                                     dp_groups[e], epdp["aux_coef"], epdp["gamma"]))
        diffs, problems, worst = {"grad": 0.0, "weight": 0.0, "bias": 0.0}, [], {}
        sd = model.state_dict()
        for k, p in model.named_parameters():
            if k not in want:
                problems.append(f"{k} is not a parameter of the reference model: keep the names (w1, w2, router)")
            elif p.grad is None:
                problems.append(f"{k} has no gradient after the step")
            else:
                for kind, got, ref_t in (("grad", p.grad, want_grads[k]), ("weight", p.detach(), want[k])):
                    dd = _diff(got, expected(k, ref_t))
                    if dd > diffs[kind]:
                        diffs[kind], worst[kind] = dd, k
        for k in sd:
            if k.endswith(".bias") and ".mlp." in k:
                dd = _diff(sd[k], want[k])
                if dd > diffs["bias"]:
                    diffs["bias"], worst["bias"] = dd, k
        if not problems:  # every parameter named as the reference's, with a gradient
            _keep(ctx, "ep_dp_grads", "step", [loss, {k: p.grad for k, p in model.named_parameters()},
                                               {k: p.detach() for k, p in model.named_parameters()},
                                               {k: sd[k] for k in sd if k.endswith(".bias") and ".mlp." in k}],
                  atol=TOL)
        return {"loss": loss, "want_loss": total, **diffs, "worst": worst, "problems": problems[:3]}
    out["step"], out["step_error"] = ctx.attempt(step)
    if out["step_error"]:
        return out
    cdist.teardown()
    return out


def task_train(ctx, target, run=RESUME, seed=SEED, save_at=None, ckpt=None, resume=False, mark=None):
    """The run ep_resume compares: steps of ep_dp_step on every rank's own batches (batch (step, rank) fixed), a
    digest of the rank's whole state after each; with save_at, a checkpoint, two more steps and a second checkpoint
    killed half-written (_held_save.py); with resume, a model
    built from another seed (so only the load can bring the weights and biases back) and the steps after it. Each
    tensor's own digest is kept right after the load, and after step `mark` of the uninterrupted run: what a load
    failed to bring back, by name."""
    import torch
    import torch.distributed as dist

    from labs.common import dist as cdist
    from labs.common.data import TokenFile, ensure_corpus

    env = cdist.init(timeout_s=30)
    solo = [dist.new_group([r]) for r in range(env.world_size)]  # dp 1: each rank is its own dp group
    out = ctx.partial
    held = HeldSave(ctx, out)  # before the learner's code is imported
    data = TokenFile.open(ensure_corpus(256))
    b = run["batch"]
    seam = seams.load(LAB, target)
    init = seed + 1000 * resume
    model = tiny_model(init).to(env.device)
    torch.manual_seed(init)
    model = seam.apply_moe(model, run["experts"], run["k"], run["factor"]) or model
    with torch.no_grad():  # biases that differ from the saved ones: the load must bring those back
        for block in model.blocks:
            block.mlp.bias.copy_(torch.randn(run["experts"]) * 0.01 * resume)
    model = seam.apply_expert_parallel(model, None) or model
    opt = torch.optim.AdamW(model.parameters(), lr=run["lr"])
    start = seam.load_checkpoint(ckpt, model, opt) if resume else 0
    out.update(start=start, digests=[], world_size=env.world_size)

    def by_name():
        return {k: digest([(k, t)]) for k, t in model.state_dict().items()}
    if resume:
        out["loaded"] = by_name()

    def go(a, z):
        for step in range(a, z):
            first = (step * env.world_size + env.rank) * b
            x, y = data.batch(list(range(first, first + b)), model.cfg.block_size, env.device)
            seam.ep_dp_step(model, opt, (x, y), solo[env.rank], run["aux_coef"], run["gamma"])
            out["digests"].append(digest(model.state_dict().items()))
            if step + 1 == mark:
                out["marked"] = by_name()

    go(start, save_at or run["steps"])
    if not save_at and not resume:  # what a rank holds: weights, gradients, AdamW's moments (the step counters aside)
        seen = {id(p): p for p in model.parameters()}.values()
        moments = [t for st in opt.state.values() for t in st.values() if torch.is_tensor(t) and t.dim()]
        out["state_bytes"] = sum(t.numel() * t.element_size() for t in [*seen, *(p.grad for p in seen
                                                                                  if p.grad is not None), *moments])
    if save_at:
        seam.save_checkpoint(ckpt, model, opt, save_at)  # complete: the checkpoint a resume must come back to
        out["complete_at"] = save_at
        go(save_at, save_at + 2)
        held.armed = True  # the next torch.save is cut in half and the run killed inside it
        seam.save_checkpoint(ckpt, model, opt, save_at + 2)
        out["held"] = False  # no torch.save was called: the kill lands after the save instead
        ctx.await_kill(out, lambda: go(save_at + 2, run["steps"]))
    cdist.teardown()
    return out


TASKS = {"probe": task_probe, "units": task_units, "ep": task_ep, "epdp": task_epdp, "train": task_train}
