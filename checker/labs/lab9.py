"""Lab 9 checks: FlashAttention by tiles, then attention across ranks (ring, zig-zag, Ulysses).

Three runs (ranks started by checker/spawn.py, the harness default):
  flash    world size 1: the learner's flash_attention vs torch's scaled_dot_product_attention (values and the
           gradients of a random upstream gradient), causal and not, at lengths no tile divides; the bytes its forward
           leaves for backward: storages its ops made (seen by a dispatch mode) that the autograd graph still holds.
  ring     N = 2 or 3 ranks (the hidden variant picks): ring_attention on contiguous and zig-zag shards (the learner's
           zigzag_shard) vs full attention, which every rank computes from the same seed BEFORE the learner's code is
           imported; bytes sent, from the checker's own counter on torch.distributed (installed before that import
           too); per-rank matmul FLOPs of forward, from a dispatch mode that sees every op the learner's code runs;
           when each receive was started and waited for, against when the tile matmuls ran (overlap).
  ulysses  N ranks: ulysses_attention vs full attention, its all-to-all bytes, and the error it must raise when the
           heads do not split over the ranks.
  cp       4 ranks, dp 2 x cp 2: the tiny GPT under apply_context_parallel, one cp_dp_step on zig-zag tokens, vs
           one process's step on the global batch, which every rank takes itself before the learner's code is
           imported: the loss, every gradient and every weight after the update.
  cp_full, cp_killed, cp_resumed   4 ranks each (checker/labs/lab9_resume.py): the same CP x DP job uninterrupted,
           killed inside the write of its second checkpoint, and resumed by fresh processes: the weights after every
           step, digested by the checker.
The learner's code never reports a number the checker uses: outputs and gradients are compared by the checker,
bytes and FLOPs are counted beneath the learner's calls.
"""
from __future__ import annotations

from checker import seams
from checker.labs import lab9_resume
from checker.labs._common import Check, probe, tiny_model
from checker.labs.lab9_measure import (
    FlopCounter,
    P2PTimeline,
    grads,
    in_flight_compute,
    kept_bytes,
    max_diff,
    randn,
    sdpa,
    shard,
)

LAB = "lab9"
WORLD_SIZE = 2
GRADE_SECONDS = 60
WHERE = "labs/lab9_long_context"
SEED = 9
# (batch, heads, seq, head_dim, causal, block_q, block_k): seq odd, so no tile size divides it; a hidden variant
# lengthens every seq by an even amount (grade()).
FLASH_CASES = [(2, 2, 37, 16, False, 16, 16), (1, 3, 50 - 1, 8, True, 16, 8), (2, 1, 29, 8, True, 8, 16)]
MEM_SHAPE = (1, 2, 256, 16, 32)  # (b, h, s, d, tile): s*s = 16x s*d, so a kept s x s tensor stands out
RING = dict(heads=2, head_dim=8, chunk=7, block=4, balance_chunk=8)  # chunk: s = 2N*chunk; block ∤ 2*chunk
ULYSSES = dict(head_dim=8, rows=5)  # heads = 2N, s = N*rows
CP = dict(dp=2, cp=2, batch=4, lr=0.1)  # 4 ranks: 2 dp groups of 2 cp ranks; tiny's whole 64-token windows
TOL = 2e-5  # fp32: a tiled softmax sums in another order than SDPA's kernel; measured <= 4e-6 here (3 ranks)

# One GPU shared over gloo: gloo moves no send/recv or all-to-all of CUDA tensors, and the course stages them
# through host memory (labs/common/staging.py), so every check runs there too
CHECKS = [
    Check("flash_equivalence", "flash_attention equals scaled_dot_product_attention in output and in the gradients "
          f"of q, k and v (atol {TOL:g}), causal and not, at sequence lengths that are not a multiple of the tile",
          f"The online softmax ({WHERE}/flash.py): when a tile raises a row's maximum, what was summed so far must be "
          "rescaled; backward rebuilds probabilities from the row's full log-sum-exp; the last tile of a row is "
          "shorter than the others; causal compares positions, key after query is masked."),
    Check("flash_memory", "the bytes flash_attention's forward leaves for backward (measured: every storage its ops "
          "created that the autograd graph still holds, output aside) <= 3 inputs + one fp32 per row: 12bhsd + 4bhs, "
          "no s x s tensor",
          f"Keep for backward only what its tile loop reads ({WHERE}/flash.py): the inputs, the output and one "
          "number per query row; anything of size s x s (scores, probabilities, masks) must be rebuilt per tile."),
    Check("ring_equivalence", "ring_attention on N = 2 or 3 ranks, contiguous and zig-zag shards, causal and not: "
          "each rank's output rows and its rows of dq, dk, dv equal full attention's",
          f"In the ring ({WHERE}/ring.py) a block's keys come from another rank: the causal mask compares GLOBAL "
          "positions (whose block is it at this step?); partial outputs merge by their log-sum-exp; K and V travel "
          "together; each block's dK, dV must end on the rank that owns it. Zig-zag: chunks r then 2N-1-r "
          f"({WHERE}/zigzag.py).",
          ),
    Check("ring_bytes", "bytes each rank sends, counted from its point-to-point calls: forward 2(N-1)/N of K and V, "
          "backward 2(N-1)/N of K and V + dK and dV once round the ring (2 S), nothing else",
          f"Each step passes on exactly the block it holds, once ({WHERE}/ring.py): no send at the last step of "
          "forward; backward's running dK, dV make N hops back to their owner; an all-gather of K/V moves the same "
          "forward bytes but holds the whole sequence on every rank.",
          ),
    Check("ring_overlap", "in ring_attention's forward every K/V transfer is in flight while tile matmuls run: "
          "between starting each receive and waiting for it, the checker sees matmuls (observed beneath your code)",
          f"Start the next block's transfer before this block's tiles and wait for it after them ({WHERE}/ring.py): "
          "non-blocking point-to-point; a blocking send, or a wait right after starting it, leaves the link and the "
          "cores taking turns.",
          ),
    Check("zigzag_balance", "per-rank matmul FLOPs of ring_attention's causal forward and backward on zig-zag shards "
          "(counted by the checker) within 10% of each other, and tiles above the diagonal skipped in both passes "
          "(each <= 3/4 of the same code's non-causal FLOPs)",
          f"Zig-zag ({WHERE}/zigzag.py): rank r holds chunks r and 2N-1-r of 2N, so every rank sees as many "
          "(query, key) pairs; the ring must skip tiles whose keys all lie after their queries (flash.py), or "
          "causal costs as much as full attention.",
          ),
    Check("ulysses_equivalence", "ulysses_attention on N ranks: each rank's output rows and gradients equal full "
          "attention's; heads not divisible by N raise ValueError",
          f"The re-shard ({WHERE}/ulysses.py): peer j must receive its own heads of your rows and put them at "
          "sequence position j*s/N; the way back is the inverse, and each is the other's gradient. Check "
          "heads % N before any communication.",
          ),
    Check("ulysses_bytes", "bytes each rank sends in Ulysses, counted from its collectives: 4 all-to-alls of its "
          "(b, h, s/N, d) block forward, (N-1)/N of each, and the same backward",
          f"Four re-shards per direction ({WHERE}/ulysses.py): q, k and v to heads, the output back; one "
          "all-to-all each, no all-gather of the sequence (that sends N times more).",
          ),
    Check("cp_dp_equivalence", "a CP x DP step of the tiny GPT (dp 2 x cp 2, zig-zag tokens, the model's code "
          "unchanged): loss, every gradient and every weight after the update equal one process's step on the "
          f"global batch (atol {TOL:g})",
          f"Each rank sees its own tokens ({WHERE}/cp_step.py): they sit at GLOBAL positions, which the position "
          "embedding must be given; each rank's gradient is its tokens' share of the mean, to be combined over "
          "every rank of both dimensions.",
          ),
    Check("cp_resume", "a CP x DP job (dp 2 x cp 2, AdamW, a warm-up schedule) saves, trains on, and is SIGKILLed "
          "inside its next save's write; fresh processes resume it: the checkpoint that loads is the last complete "
          "one, and the weights after every later step are bit-identical to the uninterrupted job's",
          f"What must a fresh job hold to take the next step as this one would, and how many copies of it does a CP x "
          f"DP mesh have ({WHERE}/cp_checkpoint.py)? CP splits tokens, not parameters. A kill halfway through a "
          "write must leave the previous checkpoint whole: write elsewhere, then rename.",
          ),
]


# ---------------------------------------------------------------- worker side
def task_probe(ctx, target):
    return probe(LAB, target)


def task_flash(ctx, target, cases=FLASH_CASES, mem=MEM_SHAPE, seed=SEED):
    import torch

    from labs.common import dist as cdist

    dev = cdist.init().device  # one process: the grade's device (CUDA on a GPU node)
    gen = torch.Generator().manual_seed(seed)
    data = []  # the checker's own SDPA results, computed before the learner's code is imported
    for b, h, s, d, causal, _, _ in cases:
        q, k, v, g = (randn(gen, b, h, s, d, device=dev) for _ in range(4))
        data.append((q, k, v, g, grads(sdpa(causal), q, k, v, g)))
    seam = seams.load(LAB, target)
    out = ctx.partial
    out["cases"] = [list(c) for c in cases]

    def equivalence():
        return [max_diff(grads(lambda *t, c=c: seam.flash_attention(*t, causal=c[4], block_q=c[5], block_k=c[6]),
                                 q, k, v, g), want) for c, (q, k, v, g, want) in zip(cases, data)]
    out["equiv"], out["equiv_error"] = ctx.attempt(equivalence)

    b, h, s, d, tile = mem
    inputs = [randn(gen, b, h, s, d, device=dev).requires_grad_() for _ in range(3)]

    def memory():
        rows = {}
        for causal in (False, True):
            n, big, o = kept_bytes(lambda *t, c=causal: seam.flash_attention(*t, causal=c, block_q=tile,
                                                                             block_k=tile), inputs)
            rows["causal" if causal else "full"] = {"bytes": n, "largest": big}
            del o
        # the textbook formula, measured the same way: what flash saves you from
        naive, big, _ = kept_bytes(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / d ** 0.5, -1) @ v, inputs)
        rows["naive"] = {"bytes": naive, "largest": big}
        return rows
    out["mem"], out["mem_error"] = ctx.attempt(memory)
    out["mem_shape"] = list(mem)
    return out


def _ring_case(seam, env, full, want, layout, causal, block, comm=None):
    """Max diff of this rank's rows of output and gradients; with comm, the bytes sent in forward and backward."""
    import torch

    r, n = env.rank, env.world_size
    q, k, v, g = ((seam.zigzag_shard(t, r, n, 2) if layout == "zigzag" else shard(t, r, n, layout)).detach()
                  .contiguous() for t in full)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    if comm:
        comm.start()
    out = seam.ring_attention(*leaves, causal=causal, layout=layout, block=block)
    fwd = comm.stop() if comm else []
    if comm:
        comm.start()
    gs = torch.autograd.grad(out, leaves, g)
    bwd = comm.stop() if comm else []
    mine = [shard(w, r, n, layout) for w in want]
    return {"diff": max_diff([out.detach(), *gs], mine),
            "fwd": [[op, size, sent] for op, size, sent in fwd], "bwd": [[op, size, sent] for op, size, sent in bwd]}


def task_ring(ctx, target, ring=RING, seed=SEED):
    import torch

    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    env = cdist.init(timeout_s=20)
    comm = CommBytes()  # before the learner's code is imported: every spelling of isend reaches it
    timeline = P2PTimeline()  # on top of it, as early
    n, h, d = env.world_size, ring["heads"], ring["head_dim"]
    gen = torch.Generator().manual_seed(seed)  # the same full tensors on every rank
    s = 2 * n * ring["chunk"]
    full = [randn(gen, 1, h, s, d, device=env.device) for _ in range(4)]
    want = {c: grads(sdpa(c), *full) for c in (True, False)}  # before the import, as above
    sb = 2 * n * ring["balance_chunk"]
    bal = [randn(gen, 1, h, sb, d, device=env.device) for _ in range(3)]
    seam = seams.load(LAB, target)
    out = ctx.partial
    out.update(world=n, shape=[1, h, s, d], balance_shape=[1, h, sb, d])
    for name, layout, causal, counted in (("contiguous", "contiguous", True, True), ("zigzag", "zigzag", True, False),
                                          ("full", "contiguous", False, False)):
        out[name], out[f"{name}_error"] = ctx.attempt(lambda layout=layout, causal=causal, counted=counted: _ring_case(
            seam, env, full, want[causal], layout, causal, ring["block"], comm if counted else None))
        if out[f"{name}_error"]:
            return out  # a peer may be inside a send: stop here, and skip teardown's barrier

    def flops(layout, causal=True):  # forward and backward: the contract skips tiles above the diagonal in both
        local = [(seam.zigzag_shard(t, env.rank, n, 2) if layout == "zigzag" else shard(t, env.rank, n, layout))
                 .contiguous().requires_grad_() for t in bal]
        fwd, bwd = FlopCounter(), FlopCounter()
        with fwd.mode:
            o = seam.ring_attention(*local, causal=causal, layout=layout, block=ring["block"])
        with bwd.mode:
            o.backward(torch.ones_like(o))
        return [fwd.flops, bwd.flops]
    for name, layout, causal in (("zigzag", "zigzag", True), ("contiguous", "contiguous", True),
                                 ("noncausal", "contiguous", False)):
        out[f"flops_{name}"], out[f"flops_{name}_error"] = ctx.attempt(lambda a=layout, c=causal: flops(a, c))
        if out[f"flops_{name}_error"]:
            return out

    def overlap():  # not causal: every step has tiles to compute on every rank
        local = [shard(t, env.rank, n, "contiguous").contiguous() for t in bal]
        counter = FlopCounter()
        timeline.start()
        with torch.no_grad(), counter.mode:
            seam.ring_attention(*local, causal=False, layout="contiguous", block=ring["block"])
        events = timeline.stop()
        return {"tiles_in_flight": in_flight_compute(events, counter.times),
                "ops": sorted({e[0] for e in events}), "matmuls": len(counter.times)}
    out["overlap"], out["overlap_error"] = ctx.attempt(overlap)
    if out["overlap_error"]:
        return out
    timeline.uninstall()
    comm.uninstall()
    cdist.teardown()
    return out


def task_ulysses(ctx, target, ulysses=ULYSSES, seed=SEED):
    import torch

    from labs.common import dist as cdist
    from labs.instruments.comm_bytes import CommBytes

    env = cdist.init(timeout_s=20)
    comm = CommBytes()
    n, d = env.world_size, ulysses["head_dim"]
    h, s = 2 * n, n * ulysses["rows"]
    gen = torch.Generator().manual_seed(seed)
    full = [randn(gen, 1, h, s, d, device=env.device) for _ in range(4)]
    want = grads(sdpa(True), *full)
    seam = seams.load(LAB, target)
    out = ctx.partial
    out.update(world=n, shape=[1, h, s, d])

    def equivalence():
        q, k, v, g = (shard(t, env.rank, n, "contiguous").contiguous() for t in full)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        comm.start()
        o = seam.ulysses_attention(*leaves, causal=True)
        fwd = comm.stop()
        comm.start()
        gs = torch.autograd.grad(o, leaves, g)
        bwd = comm.stop()
        mine = [shard(w, env.rank, n, "contiguous") for w in want]
        return {"diff": max_diff([o.detach(), *gs], mine), "fwd": [list(r) for r in fwd],
                "bwd": [list(r) for r in bwd]}
    out["equiv"], out["equiv_error"] = ctx.attempt(equivalence)
    if out["equiv_error"]:
        return out

    def uneven():
        x = torch.randn(1, h + 1, s // n, d, device=env.device)
        try:
            seam.ulysses_attention(x, x, x, causal=True)
        except ValueError as exc:
            return {"raised": "ValueError", "message": str(exc)[:300]}
        except Exception as exc:  # noqa: BLE001 - any other error is not the clear one asked for
            return {"raised": type(exc).__name__, "message": str(exc)[:300]}
        return {"raised": None, "message": ""}
    out["uneven"], out["uneven_error"] = ctx.attempt(uneven)
    comm.uninstall()
    cdist.teardown()
    return out


def task_cp(ctx, target, cp=CP, seed=SEED):
    import torch
    import torch.distributed as dist

    from labs.common import dist as cdist
    from labs.common.data import TokenFile, ensure_corpus

    env = cdist.init(timeout_s=20)
    n_cp, n_dp = cp["cp"], cp["dp"]
    groups = [dist.new_group([d * n_cp + c for c in range(n_cp)]) for d in range(n_dp)]  # every rank makes each
    d, c = divmod(env.rank, n_cp)
    ref = tiny_model(seed).to(env.device)  # one process's step on the global batch, before the learner's import
    s = ref.cfg.block_size
    x, y = TokenFile.open(ensure_corpus(ref.cfg.vocab_size)).batch(
        list(range(seed % 7 * cp["batch"], (seed % 7 + 1) * cp["batch"])), s, env.device)
    want_loss = ref(x, y)[1]
    want_loss.backward()
    want_grads = {k: p.grad.clone() for k, p in ref.named_parameters()}
    torch.optim.SGD(ref.parameters(), lr=cp["lr"]).step()
    want = dict(ref.named_parameters())
    rows = cp["batch"] // n_dp
    local = [shard(t[d * rows:(d + 1) * rows, None, :, None], c, n_cp, "zigzag")[:, 0, :, 0] for t in (x, y)]
    seam = seams.load(LAB, target)
    out = ctx.partial

    def step():
        model = tiny_model(seed).to(env.device)
        model = seam.apply_context_parallel(model, groups[d], s, "zigzag") or model
        loss = float(seam.cp_dp_step(model, torch.optim.SGD(model.parameters(), lr=cp["lr"]), local))
        diffs, problems = {"grad": 0.0, "weight": 0.0}, []
        for k, p in model.named_parameters():
            if k not in want:
                problems.append(f"{k} is not a parameter of the model: keep the model's names")
            elif p.grad is None:
                problems.append(f"{k} has no gradient")
            else:
                diffs["grad"] = max(diffs["grad"], (p.grad - want_grads[k]).abs().max().item())
                diffs["weight"] = max(diffs["weight"], (p.detach() - want[k].detach()).abs().max().item())
        return {"loss": loss, "want_loss": want_loss.item(), **diffs, "problems": problems[:3]}
    out["step"], out["step_error"] = ctx.attempt(step)
    if out["step_error"]:
        return out
    cdist.teardown()
    return out


TASKS = {"probe": task_probe, "flash": task_flash, "ring": task_ring, "ulysses": task_ulysses, "cp": task_cp,
         **lab9_resume.TASKS}

# ---------------------------------------------------------------- checker side
RUNS = {"flash_equivalence": {"flash"}, "flash_memory": {"flash"}, "ring_equivalence": {"ring"},
        "ring_bytes": {"ring"}, "ring_overlap": {"ring"}, "zigzag_balance": {"ring"},
        "ulysses_equivalence": {"ulysses"}, "ulysses_bytes": {"ulysses"}, "cp_dp_equivalence": {"cp"},
        "cp_resume": {"cp_full", "cp_killed", "cp_resumed"}}


def ranks_needed(check: str, variant: int = 0) -> int:
    """The most ranks any run of `check` takes at this variant (make gpu-check: which checks fit the GPUs)."""
    size = {"flash": 1, "ring": world_size(variant), "ulysses": world_size(variant), "cp": CP["dp"] * CP["cp"],
            **{name: lab9_resume.RESUME["dp"] * lab9_resume.RESUME["cp"] for name in ("cp_full", "cp_killed",
                                                                                    "cp_resumed")}}
    return max(size[run] for run in RUNS[check])


def world_size(variant: int) -> int:
    # 3 ranks in the public grade: with 2 the next rank and the previous one are the same, and dK, dV sent the
    # wrong way round the ring would still arrive; hidden variants: 2 ranks on odd ones
    return 3 - variant % 2
