"""checker/labs/_differential.py in one process: a train_step written differently but correctly matches the
reference within the tolerances; a wrong one is named by the criterion it breaks."""
import copy

import pytest
import torch

from checker.labs._common import tiny_model
from checker.labs._differential import first_difference, logit_scale, randomise, side_by_side
from labs.common.data import TokenFile, ensure_corpus
from solutions.lab1_baseline import train_step as reference_step


def rewritten_step(model, optimizer, scheduler, batch):
    """Right, but not the reference's float ops: the loss from the logits, a hand-written global-norm clip."""
    x, y = batch
    for p in model.parameters():
        p.grad = None
    logits, _ = model(x, y)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    norm = sum(p.grad.pow(2).sum() for p in model.parameters()).sqrt()
    for p in model.parameters():
        p.grad.mul_(torch.clamp(1.0 / (norm + 1e-6), max=1.0))
    optimizer.step()
    scheduler.step()
    return float(loss.detach())


def summed_step(model, optimizer, scheduler, batch):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    logits, _ = model(x, y)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss.item()


def _compare(step_fn):
    data = TokenFile.open(ensure_corpus(256))
    base = tiny_model(5, dropout=0.1)
    randomise(base, 5)
    runs = {}
    for who, fn in (("reference", reference_step), ("learner", step_fn)):
        model = copy.deepcopy(base)
        runs[who] = (fn, model, logit_scale(model))
    plan = [(data.batch(range(k * 8, k * 8 + 8), 64), 5.0 if k == 2 else 1.0) for k in range(4)]
    return side_by_side(runs, plan, seed=5)


def test_a_correct_rewrite_matches_and_the_clip_step_really_clips():
    r = _compare(rewritten_step)
    assert first_difference(r) is None, first_difference(r)
    norms = [s["pre_norm"] for s in r["reference"]]
    assert max(norms[:2] + norms[3:]) < 1.0 < norms[2]  # steps under the threshold, and one over it
    assert r["reference"][2]["post_norm"] == pytest.approx(1.0, rel=1e-4)


def test_a_summed_loss_is_named_by_the_loss_it_returns():
    step, what, measured, _ = first_difference(_compare(summed_step))
    assert step == 1 and what == "loss returned" and "yours" in measured
