"""Lab 9, the worker's own side: the checker's reference attention and shards, and what it counts beneath the
learner's code: the bytes a forward leaves alive for backward and the matmul FLOPs it runs (dispatch modes, which see
every op below autograd, inside the learner's autograd Functions too), and when each transfer was in flight."""
from __future__ import annotations

import math

from checker.labs._common import StorageTracker


def randn(gen, *shape, device="cpu"):
    import torch

    return torch.randn(*shape, generator=gen).to(device)


def grads(fn, q, k, v, g):
    """(output, dq, dk, dv) of fn(q, k, v) for upstream gradient g, every tensor detached."""
    import torch

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    gs = torch.autograd.grad(out, leaves, g)
    return [out.detach(), *(x.detach() for x in gs)]


def sdpa(causal):
    import torch.nn.functional as F

    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def part_diffs(got, want) -> list[float]:
    """The largest difference of each tensor (output, dq, dk, dv); inf where the shapes differ."""
    return [(a - b).abs().max().item() if a.shape == b.shape else float("inf") for a, b in zip(got, want)]


def max_diff(got, want) -> float:
    return max(part_diffs(got, want))


def merge_case(gen, device):
    """Two partial attention results over disjoint keys, (o1, lse1, o2, lse2), and their merge worked out by the
    checker: rows where one side saw no key (lse -inf, o 0, as attention over no key leaves them), rows where
    neither did, the rest random. The ring meets the first kind only at some ranks' first blocks and never the
    second, so merge is called here directly."""
    import torch

    b, h, s, d = 2, 2, 12, 4
    o1, o2 = (randn(gen, b, h, s, d, device=device) for _ in range(2))
    lse1, lse2 = (3 * torch.rand(b, h, s, generator=gen).to(device) for _ in range(2))
    none1, none2 = torch.zeros(s, dtype=torch.bool), torch.zeros(s, dtype=torch.bool)
    none1[0:3], none2[3:6], none1[6:8], none2[6:8] = True, True, True, True  # rows 6, 7: neither side saw a key
    for o, lse, none in ((o1, lse1, none1), (o2, lse2, none2)):
        o[..., none.to(device), :] = 0
        lse[..., none.to(device)] = -math.inf
    lse = torch.logaddexp(lse1.double(), lse2.double())
    w1 = torch.where(none1.to(device), 0.0, torch.exp(lse1.double() - lse.nan_to_num(neginf=0.0)))
    w2 = torch.where(none2.to(device), 0.0, torch.exp(lse2.double() - lse.nan_to_num(neginf=0.0)))
    want = ((o1.double() * w1[..., None] + o2.double() * w2[..., None]).float(), lse.float())
    return (o1, lse1, o2, lse2), {"o": want[0], "lse": want[1], "one": (none1 ^ none2), "both": none1 & none2}


def merge_diffs(got, want) -> dict:
    """{rows kind: largest difference} between merge's (o, lse) and the checker's, over rows where one side saw no
    key, where neither did, and the rest; a NaN or a wrong -inf counts as inf."""
    import torch

    o, lse = got
    out = {}
    for kind, rows in (("one side saw no key", want["one"]), ("neither side saw a key", want["both"]),
                       ("both sides saw keys", ~(want["one"] | want["both"]))):
        rows = rows.to(o.device)
        do = (o[..., rows, :].float() - want["o"][..., rows, :]).abs().nan_to_num(nan=math.inf)
        a, b = lse[..., rows].float(), want["lse"][..., rows]
        same_inf = torch.isinf(a) & torch.isinf(b) & (a.sign() == b.sign())
        dl = torch.where(same_inf, 0.0, (a - b).abs()).nan_to_num(nan=math.inf)
        out[kind] = max(do.max().item() if do.numel() else 0.0, dl.max().item() if dl.numel() else 0.0)
    return out


PARTS = ("the output", "dq", "dk", "dv")


def worst_part(diffs: list[float]) -> str:
    """Which of (output, dq, dk, dv) differs most (part_diffs; NaN counts as the most): the output points at forward,
    a gradient alone at backward."""
    return PARTS[max(range(len(diffs)), key=lambda i: math.inf if math.isnan(diffs[i]) else diffs[i])]


def shard(t, rank, world, layout):
    """The checker's own slicing of a (b, h, s, d) tensor: contiguous rows, or chunks rank and 2N-1-rank of 2N."""
    import torch

    if layout == "zigzag":
        c = t.chunk(2 * world, 2)
        return torch.cat([c[rank], c[2 * world - 1 - rank]], 2)
    n = t.shape[2] // world
    return t[:, :, rank * n:(rank + 1) * n]


def graph_storages(out) -> set:
    """The storages the autograd graph behind `out` holds: every node's saved tensors (a custom Function's
    save_for_backward and any tensor set on its ctx; a built-in node's _saved_* fields), all the way to the leaves."""
    import torch
    from torch.utils._pytree import tree_leaves

    keys, seen, stack = set(), set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        held = list(getattr(node, "__dict__", {}).values())
        for name in dir(node):
            if name == "saved_tensors" or name.startswith("_saved_"):
                try:
                    held.append(getattr(node, name))
                except (RuntimeError, AttributeError):  # freed already, or not a tensor field
                    pass
        keys |= {t.untyped_storage()._cdata for t in tree_leaves(held) if isinstance(t, torch.Tensor)}
        stack += [f for f, _ in node.next_functions]
    return keys


def kept_bytes(run, inputs) -> tuple[int, int, object]:
    """(bytes, largest storage's bytes, output) of every storage created while run(*copies) ran that outlives it
    and that the autograd graph holds: what is kept for backward. The inputs are copied inside, so they count only if
    kept; the output's storage is the caller's and is left out (lab 7 counts the same way). Only the graph's: a
    storage alive because something else still refers to it is not the graph's memory."""
    track = StorageTracker()
    with track:
        copies = [x * 1.0 for x in inputs]
        out = run(*copies)
        del copies
    skip, held = {out.untyped_storage()._cdata}, graph_storages(out)
    alive = [n for k, (ref, n) in track.refs.items() if k not in skip and k in held and not ref.expired()]
    return sum(alive), max(alive, default=0), out


class FlopCounter:
    """Matmul FLOPs of every op run under it (2*m*n*k per product; SDPA kernels 4*b*h*sq*sk*d, half if causal).
    A dispatch mode: it sees the ops beneath any Python the learner writes, inside autograd Functions too."""

    def __init__(self):
        import time

        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        aten, counter, now = torch.ops.aten, self, time.perf_counter
        self.flops, self.times = 0, []  # times: when each matmul ran (the checker's clock)
        mm = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default}
        sdpa = {getattr(aten, n).default for n in ("_scaled_dot_product_flash_attention_for_cpu",
                                                   "_scaled_dot_product_flash_attention",
                                                   "_scaled_dot_product_efficient_attention",
                                                   "_scaled_dot_product_cudnn_attention") if hasattr(aten, n)}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func in mm:
                    a, b = args[-2], args[-1]
                    counter.flops += 2 * a.numel() * b.shape[-1]
                    counter.times.append(now())
                elif func in sdpa:
                    q, k = args[0], args[1]
                    causal = kwargs.get("is_causal", args[4] if len(args) > 4 and isinstance(args[4], bool) else False)
                    f = 4 * q.numel() * k.shape[-2]
                    counter.flops += f // 2 if causal else f
                return func(*args, **kwargs)
        self.mode = Mode()


class P2PTimeline:
    """When each point-to-point transfer was started and when the host waited for it: wraps torch.distributed's isend
    and irecv (and distributed_c10d's own, which P2POp checks its op against and batch_isend_irecv calls), and the
    wait() of each handle they return. Install it before the learner's code is imported; uninstall before any
    wrapper installed earlier (CommBytes) is."""

    def __init__(self):
        import time

        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self._now = time.perf_counter  # taken before learner code runs
        self.events: list | None = None  # [op, launch, wait start, wait end] while recording
        self._put = []
        for name in ("isend", "irecv"):
            orig = getattr(dist, name)
            timed = self._wrap(name, orig)
            for mod in (dist, c10d):
                if getattr(mod, name) is orig:
                    setattr(mod, name, timed)
                    self._put.append((mod, name, orig, timed))

    def _wrap(self, name, orig):
        timeline = self

        class Timed:
            def __init__(self, work, event):
                self._work, self._event = work, event

            def wait(self, *args, **kwargs):
                t0 = timeline._now()
                try:
                    return self._work.wait(*args, **kwargs)
                finally:
                    if self._event[2] is None:
                        self._event[2:] = [t0, timeline._now()]

            def __bool__(self):
                return True

            def __getattr__(self, attr):
                return getattr(self._work, attr)

        def timed(*args, **kwargs):
            work = orig(*args, **kwargs)
            if timeline.events is None or work is None:
                return work
            timeline.events.append([name, timeline._now(), None, None])
            return Timed(work, timeline.events[-1])
        timed.__wrapped__ = orig
        return timed

    def start(self) -> None:
        self.events = []

    def stop(self) -> list:
        events, self.events = self.events or [], None
        return events

    def uninstall(self) -> None:
        for mod, name, orig, timed in self._put:
            if getattr(mod, name) is timed:
                setattr(mod, name, orig)


def in_flight_compute(events, mm_times) -> list[int]:
    """For each receive, in launch order: how many matmuls ran after it was started and before the host waited for
    it. 0 means the transfer did not overlap any tile math (or was never waited for: None wait start counts none)."""
    return [sum(1 for t in mm_times if launch < t < (w0 if w0 is not None else launch))
            for op, launch, w0, _ in events if op == "irecv"]
