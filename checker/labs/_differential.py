"""Differential checks: the learner's train_step and the reference's, side by side, compared step by step.

A run compared only with itself passes a step that is consistently wrong (a loss summed instead of
averaged, a scheduler stepped twice). Here both functions start from the same weights (seeded noise on
every parameter, biases and LayerNorms included, so no term is zero by accident), get the same batches
and the same RNG seed before each step, and drive the checker's own instruments:

  RecordingSGD     plain SGD (w -= lr * g): the update is proportional to the gradient, so a scale error
                   shows in the weights, where AdamW's g / sqrt(v) would cancel most of it; it records the
                   lr it was given and the norm of the gradient it applied (after clipping), per call;
  a LambdaLR       whose factor is 1 / (1 + step): every step's lr is different, so a scheduler stepped
                   twice, not at all or before the optimizer shows as a wrong lr;
  GradNormProbe    post-accumulate-grad hooks: the gradient norm when backward finished (before clipping).

The plan mixes steps whose gradient norm is under the clip threshold (scale errors visible) with a step
the checker forces over it (its logits multiplied by `scale`: clipping and its order visible).
Worker side (torch): `trajectory` runs one side, `compare` measures the learner's snapshots against the
reference's (in the reference's own run, where the learner's code never ran: lab 1), `side_by_side` does both
in one process (lab 2). Checker side (no torch): `first_difference`.
"""
from __future__ import annotations

LR = 0.05
# Tolerances: a legitimate reordering of float ops (a hand-written clip, a loss computed from the logits)
# moves fp32 results by ~1e-7 relative; a wrong step moves them by 1e-2 or more.
RTOL = 1e-4
CRITERIA = (  # in the order a wrong step is best explained by; (key, what it is, what the step did wrong)
    ("opt_steps", "optimizer.step() calls", "call optimizer.step() exactly once per train_step"),
    ("sched_steps", "scheduler.step() calls", "call scheduler.step() exactly once, after optimizer.step()"),
    ("comm", "all-reduces issued", "communicate once per optimizer step: micro-steps before the last accumulate "
                                   "locally, and the last one reduces what they summed"),
    ("lr", "lr the optimizer used", "step the scheduler once, after optimizer.step()"),
    ("loss", "loss returned", "return the mean loss of the step as a float"),
    ("pre_norm", "gradient norm after backward", "the gradient must be this step's alone, of the model's mean loss: "
                                                 "is an earlier step's still in .grad, or the loss scaled?"),
    ("post_norm", "gradient norm the optimizer applied",
     "the update must use the gradient clipped to its global norm: clipped too early, per tensor, or not at all?"),
    ("grad", "max |.grad - reference| after the step", ".grad must hold this step's clipped gradient afterwards"),
    ("weights", "max |weight - reference| after the step", "the update must be this step's"),
)


# ---------------------------------------------------------------- worker side
def randomise(model, seed: int, std: float = 0.02) -> None:
    """Seeded noise on every parameter: biases and LayerNorm shifts are zero at init, which hides terms."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(std * torch.randn(p.shape, generator=g).to(p.device, p.dtype))


def recording_sgd(params, lr: float = LR):
    import torch

    class RecordingSGD(torch.optim.SGD):
        """SGD that records, per step() call, the lr of each group and the norm of the gradient it applies."""

        def __init__(self, params, lr):
            super().__init__(params, lr=lr, foreach=False)
            self.calls = []

        @torch.no_grad()
        def step(self, closure=None):
            grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])) \
                if grads else torch.zeros(())
            self.calls.append({"lr": [g["lr"] for g in self.param_groups], "norm": float(norm)})
            return super().step(closure)

    return RecordingSGD(params, lr)


def recording_scheduler(optimizer):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))


class GradNormProbe:
    """The norm of each parameter's .grad when backward is done with it, summed over parameters."""

    def __init__(self, params):
        self.norms = {}
        self.handles = [p.register_post_accumulate_grad_hook(self._hook) for p in params]

    def _hook(self, p) -> None:
        import torch
        self.norms[id(p)] = torch.linalg.vector_norm(p.grad.detach().float())

    def take(self) -> float:
        import torch
        n = float(torch.linalg.vector_norm(torch.stack(list(self.norms.values())))) if self.norms else 0.0
        self.norms.clear()
        return n


def trajectory(fn, model, set_scale, plan: list, seed: int, comm=None) -> tuple[list, list]:
    """One side: fn's steps over `plan` = [(args for fn, scale), ...] with its own RecordingSGD and scheduler
    over `model`; before step k, set_scale(scale) and torch.manual_seed(seed + k). `comm` (a CollectiveRecorder)
    counts each step's all-reduces. Returns (records: what each step did, snapshots: the weights before step 1
    and (weights, .grad) after each step)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt, probe = recording_sgd(params), GradNormProbe(params)
    sched = recording_scheduler(opt)
    recs, snaps = [], [([p.detach().clone() for p in params], None)]
    for k, (args, scale) in enumerate(plan):
        set_scale(scale)
        torch.manual_seed(seed + k)
        n_calls, n_sched = len(opt.calls), sched.last_epoch
        if comm is not None:
            comm.start()
        loss = fn(model, opt, sched, args)
        n_comm = len(comm.stop()) if comm is not None else 0
        if not isinstance(loss, float):  # the contract: read once, as a Python number
            raise TypeError(f"train_step returned {type(loss).__name__}, expected a Python float (loss.item())")
        call = opt.calls[-1] if len(opt.calls) > n_calls else {"lr": [None], "norm": None}
        recs.append({"loss": float(loss), "opt_steps": len(opt.calls) - n_calls,
                     "sched_steps": sched.last_epoch - n_sched, "lr": call["lr"][0], "comm": n_comm,
                     "pre_norm": probe.take(), "post_norm": call["norm"]})
        snaps.append(([p.detach().clone() for p in params],
                      [None if p.grad is None else p.grad.detach().clone() for p in params]))
    for h in probe.handles:
        h.remove()
    return recs, snaps


def compare(reference: list, learner: list) -> list[dict]:
    """Per step, how far the learner's weights and .grad are from the reference's, and the scale each is
    judged on (snapshots as trajectory() returns them)."""
    diffs = []
    ref_before = [w for w, _ in reference[:-1]]
    for before, (w_ref, g_ref), (w_mine, g_mine) in zip(ref_before, reference[1:], learner[1:]):
        wd = max(float((a - b).abs().max()) for a, b in zip(w_mine, w_ref))
        # the scale of a weight difference is the step's update (lr x gradient, ~1e-3 here), not the weights
        # (~1): rounding moves a weight by an ulp of itself, 2^-23 |w|, which the floor allows 8 of
        update = max(float((b - a).abs().max()) for a, b in zip(before, w_ref))
        ulp = max(float(b.abs().max()) for b in w_ref) * 2.0 ** -23
        scale_w = max(update, 8 * ulp / RTOL)
        missing = sum(a is None for a, b in zip(g_mine, g_ref) if b is not None)
        gd = max((float((a - b).abs().max()) for a, b in zip(g_mine, g_ref) if a is not None and b is not None),
                 default=0.0)
        scale_g = max((float(b.abs().max()) for b in g_ref if b is not None), default=0.0)
        diffs.append({"weights": wd, "weights_scale": scale_w, "grad": gd, "grad_scale": scale_g,
                      "grad_missing": missing})
    return diffs


def side_by_side(runs: dict, plan: list, seed: int, comm=None) -> dict:
    """Both sides in this process: runs = {"reference": (step_fn, model, set_scale), "learner": ...}. Returns
    {"reference": [records], "learner": [records], "diffs": compare(...)}."""
    out, snaps = {}, {}
    for who, (fn, model, set_scale) in runs.items():
        out[who], snaps[who] = trajectory(fn, model, set_scale, plan, seed, comm)
    out["diffs"] = compare(snaps["reference"], snaps.get("learner", []))
    return out


# ---------------------------------------------------------------- checker side
def _close(a, b, rtol: float = RTOL) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-12)


def first_difference(result: dict) -> tuple[int, str, str, str] | None:
    """(step, what differs, 'yours X vs reference Y', what to do) for the learner's first wrong step; None if none."""
    ref, mine, diffs = result["reference"], result["learner"], result["diffs"]
    for k, (r, m, d) in enumerate(zip(ref, mine, diffs)):
        for key, what, fix in CRITERIA:
            if key in ("grad", "weights"):
                tol = RTOL * d[f"{key}_scale"]
                if key == "grad" and d["grad_missing"]:
                    return k + 1, ".grad after the step", f"{d['grad_missing']} parameters have .grad None", fix
                if d[key] > tol:
                    return k + 1, what, f"{d[key]:.2e} (tolerance {tol:.1e})", fix
            elif not (_close(m[key], r[key], 0 if key.endswith("steps") or key == "comm" else RTOL)):
                fmt = ((lambda v: "none" if v is None else f"{v:.6g}") if not (key.endswith("steps") or key == "comm")
                       else str)
                return k + 1, what, f"yours {fmt(m[key])} vs reference {fmt(r[key])}", fix
    return None


def logit_scale(model):
    """A setter for a factor on the GPT's logits (a forward hook on its head): the checker's lever to push
    a step's gradient norm over the clip threshold (x5: ~0.7 -> ~4.8 on tiny) without touching the batch
    or the model's type. The loss the model returns and one computed from its logits both see it."""
    scale = [1.0]
    model.head.register_forward_hook(lambda mod, args, out: out if scale[0] == 1.0 else out * scale[0])
    return lambda s: scale.__setitem__(0, s)
