"""The fast path, measured: a training step's parts on this device, and what each optimisation really gives.

    python -m labs.instruments.fast_path          # both shapes: the profile, then every option's measured speedup

An optimisation speeds up the part of the step it touches and nothing else (Amdahl). So before switching one on,
measure the parts:
  step_s          the baseline step: fp32, eager, AdamW as a for-loop over parameters (foreach=False)
  half_step_s     the same step at half the micro-batch
  optimizer_s     the baseline's optimizer.step() alone (one small op per parameter tensor and moment)
  fused_optimizer_s  the same update as one fused kernel (AdamW(fused=True))
  matmul_s        every matmul of forward and backward (the shapes recorded from one step), replayed alone in fp32
  matmul_bf16_s   the same matmuls in bf16, each operand cast from fp32 first, as autocast does
and the options, each against the baseline, as tokens/s ratios:
  fused_adamw     the optimizer fused into one kernel
  bf16            forward and loss under bf16 autocast (matmuls in bf16; masters, gradients and moments fp32)
  batch2          twice the micro-batch (tokens/s, not step time)
Timing: every number is a median of interleaved repeats (each option beside the baseline in every round), so load
on the machine hits both sides of a ratio alike; one thread, as the checker's runs have.
"""
from __future__ import annotations

import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from labs.common.metrics import flops_per_token
from labs.common.model import GPT, GPTConfig

OPTIONS = ("fused_adamw", "bf16", "batch2")
# (n_embd, n_layer, n_head, batch, seq): a step the per-op costs dominate (h = 64, 64 tokens: a 64 x 64 x 256 matmul
# is 2 MFLOP, ~20 us at this core's ~90 GFLOP/s, about what launching any op costs), and one its matmuls dominate
# (h = 256, 1,536 tokens: a 1536 x 256 x 1024 matmul is 805 MFLOP, ~9 ms), so much that what a step costs whatever its
# size (the optimizer, Python) is ~5% of it.
SHAPES = {"launch_bound": (64, 2, 4, 2, 32), "compute_bound": (256, 1, 4, 12, 128)}
_MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


def build(shape, seed: int = 0):
    """(model, batch of token ids) for one shape; no dropout, so every repeat does the same work."""
    h, n_layer, n_head, b, s = shape
    cfg = GPTConfig(vocab_size=256, block_size=s, n_layer=n_layer, n_head=n_head, n_embd=h, dropout=0.0)
    torch.manual_seed(seed)
    return GPT(cfg), torch.randint(0, cfg.vocab_size, (b, s), generator=torch.Generator().manual_seed(seed))


def make_step(model, x, option: str = "baseline"):
    """(step(), tokens per step) for the baseline or one option."""
    kind = {"fused_adamw": dict(fused=True)}.get(option, dict(foreach=False))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **kind)
    xb = torch.cat([x, x]) if option == "batch2" else x

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=option == "bf16"):
            _, loss = model(xb, xb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, xb.numel(), opt


class _Matmuls(TorchDispatchMode):
    """Records the operand shapes of every matmul dispatched."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _MATMULS:
            self.calls.append((func, [a.shape if isinstance(a, torch.Tensor) else a for a in args]))
        return func(*args, **(kwargs or {}))


MIN_TIMED_S = 0.03  # a timing shorter than a scheduler tick (~4 ms) is mostly noise: repeat the call to ~30 ms
# The clock: this process's CPU seconds, not the wall's. On one thread they are the step's work; a busy neighbour
# stretches wall time (measured here beside three other jobs on 2 cores: the same tiny step 2.8 to 21 ms of wall
# time from one run to the next) but not the CPU time the step itself used.
clock = time.process_time


def _calls_for(fn) -> int:
    """How many calls of fn make one timing of at least MIN_TIMED_S (fn is called once here: the warm-up)."""
    t0 = clock()
    fn()
    return max(1, round(MIN_TIMED_S / max(clock() - t0, 1e-6)))


def _time_s(fn, calls: int) -> float:
    t0 = clock()
    for _ in range(calls):
        fn()
    return (clock() - t0) / calls


def _median_s(fn, reps: int) -> float:
    calls = _calls_for(fn)
    return statistics.median(_time_s(fn, calls) for _ in range(reps))


def _replay(calls, dtype):
    """A function running every recorded matmul on fresh operands; in `dtype` with each fp32 operand cast first."""
    operands = [(f, [torch.randn(a) if isinstance(a, torch.Size) else a for a in args]) for f, args in calls]
    if dtype is None:
        return lambda: [f(*args) for f, args in operands]
    return lambda: [f(*[a.to(dtype) if isinstance(a, torch.Tensor) else a for a in args]) for f, args in operands]


def profile(shape, reps: int = 5) -> dict:
    """The parts of the baseline step for `shape`, in seconds (see the module's docstring), its FLOPs, and
    this core's matmul ceiling (the MFU denominator)."""
    model, x = build(shape)
    step, tokens, opt = make_step(model, x)
    half, _, _ = make_step(model, x[: max(1, x.shape[0] // 2)])
    rec = _Matmuls()
    with rec:
        model(x, x)[1].backward()
    fused = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    out = {"shape": list(shape), "tokens": tokens, "optimizer_s": _median_s(opt.step, reps),
           "fused_optimizer_s": _median_s(fused.step, reps), "matmul_s": _median_s(_replay(rec.calls, None), reps),
           "matmul_bf16_s": _median_s(_replay(rec.calls, torch.bfloat16), reps)}
    opt.zero_grad(set_to_none=True)
    full, halves, n_full, n_half = [], [], _calls_for(step), _calls_for(half)
    for _ in range(reps):  # interleaved: both sizes see the same load
        full.append(_time_s(step, n_full))
        halves.append(_time_s(half, n_half))
    out.update(step_s=statistics.median(full), half_step_s=statistics.median(halves),
               flops=flops_per_token(model.cfg, x.shape[1]) * tokens, ceiling_flops_s=matmul_ceiling(rec.calls))
    return out


def measure(shape, options=OPTIONS, rounds: int = 5) -> dict:
    """{option: tokens/s of the option / tokens/s of the baseline}, medians over `rounds` interleaved rounds."""
    model, x = build(shape)
    steps = {o: make_step(model, x, o)[:2] for o in ("baseline", *options)}
    calls = {o: _calls_for(fn) for o, (fn, _) in steps.items()}
    per_token = {o: [] for o in steps}
    for _ in range(rounds):
        for o, (fn, tokens) in steps.items():
            per_token[o].append(_time_s(fn, calls[o]) / tokens)
    base = per_token["baseline"]
    return {o: statistics.median(b / t for b, t in zip(base, per_token[o])) for o in options}


def matmul_ceiling(calls, reps: int = 5) -> float:
    """FLOP/s of this device's fastest matmul among the step's own (2-D) matmul shapes and a square 1024^3: the
    ceiling MFU is honest against. One shape is not enough: at h = 256 the step's matmuls ran at 60-83 GFLOP/s by
    shape on this core, and a step measured against its forward's shape alone reached 102%."""
    sizes = {(1024, 1024, 1024)}
    for _, args in calls:
        a, b = [x for x in args if isinstance(x, torch.Size)][-2:]  # addmm's bias comes first
        if len(a) == 2:
            sizes.add((a[0], a[1], b[1]))
    best = 0.0
    for m, k, n in sizes:
        a, w = torch.randn(m, k), torch.randn(k, n)
        best = max(best, 2 * m * k * n / _median_s(lambda a=a, w=w: a @ w, reps))
    return best


def run(shapes: dict = SHAPES, reps: int = 5, rounds: int = 5) -> dict:
    """{name: {profile, measured, mfu}} for each shape, on one thread: what the checker, the bench, the notebook and
    the lab's script all read. mfu: the baseline step's FLOP/s over this core's matmul ceiling."""
    torch.set_num_threads(1)
    out = {}
    for name, shape in shapes.items():
        p = profile(tuple(shape), reps)
        out[name] = {"profile": p, "measured": measure(tuple(shape), rounds=rounds),
                     "mfu": p["flops"] / p["step_s"] / p["ceiling_flops_s"]}
    return out


def main():
    for name, row in run().items():
        p, r, mfu = row["profile"], row["measured"], row["mfu"]
        shape = tuple(p["shape"])
        print(f"{name} {shape}: step {p['step_s'] * 1e3:.1f} ms (half batch {p['half_step_s'] * 1e3:.1f}), "
              f"matmuls {p['matmul_s'] * 1e3:.1f} fp32 / {p['matmul_bf16_s'] * 1e3:.1f} bf16, optimizer "
              f"{p['optimizer_s'] * 1e3:.2f} / fused {p['fused_optimizer_s'] * 1e3:.2f}; "
              f"{mfu:.0%} of the matmul ceiling")
        print("   measured speedups: " + ", ".join(f"{o} {v:.2f}x" for o, v in r.items()))


if __name__ == "__main__":
    main()
