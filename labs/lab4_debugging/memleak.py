# GENERATED from solutions/lab4_debugging/memleak.py by `make starters` (checker/starters.py).
# This is your copy: find and fix what breaks. Edits to the course belong in solutions/.
"""A training loop whose memory grows step over step, run with the memory history on.

Not an exercise: this is the evidence you analyse in forensics.py's find_memory_leak. The course's tiny GPT trains
a few steps; a case keeps something across steps that it should not:

  logits   each step's logits appended to a list "to inspect later": .detach() drops the graph, not the tensor
  losses   each step's validation loss appended as a tensor (no .item(), no torch.no_grad()): it keeps its graph,
           and the graph keeps every activation the forward saved for a backward that never runs
  cache    each step's probabilities (softmax of the logits) in a dict keyed by step, "for calibration plots"
  clean    none of these: what stays allocated (the optimizer's state, the last step's batch) is allocated once

    python -m labs.lab4_debugging.memleak logits      # -> runs/lab4/memory/logits.pickle
    python -m labs.lab4_debugging.forensics --memory runs/lab4/memory/logits.pickle

Open the .pickle in https://pytorch.org/memory_viz (Active Memory Timeline): a staircase, one stair per step.
On a GPU the recording is torch's own (_record_memory_history); on the CPU labs/instruments/memory_history.py
emulates it in the same format. What each stair holds, float32 logits (4 bytes), batch B, sequence S, vocabulary V:
  logits, cache   B·S·V·4 bytes (8 x 64 x 256 x 4 = 524,288 = 512 KiB at the public sizes)
  losses          every tensor the validation forward saved for backward: per layer the LayerNorm inputs, q, k, v,
                  the attention's output and statistics, the MLP's inputs (B·S·4C·4 each), the dropout masks, and
                  B·S·V·4 of log-probabilities for the loss: 8,802,824 bytes at the public sizes, 17x the logits
                  (saved_bytes measures it)
"""
from __future__ import annotations

import argparse
import inspect
from dataclasses import dataclass
from pathlib import Path

KINDS = ("logits", "losses", "cache", "clean")
# The statement each leak's kept tensors are allocated by (in train below): its line is the answer key.
LEAKS_AT = {"logits": "logits, loss = model(x, y)", "losses": "val_losses.append(model(xv, yv)[1])",
            "cache": "cache[step] = logits.detach().softmax(-1)"}


@dataclass
class Case:
    kind: str
    batch: int = 8
    seq: int = 64
    steps: int = 8

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")


def case(kind: str, variant: int = 0) -> Case:
    """The public case at variant 0; a hidden variant moves the batch, the sequence and the number of steps."""
    v = variant + KINDS.index(kind)
    return Case(kind, batch=8 if variant == 0 else (4, 6, 10)[v % 3], seq=64 if variant == 0 else (32, 48, 56)[v % 3],
                steps=8 if variant == 0 else 5 + v % 4)


def train(c: Case, device="cpu") -> dict:
    """c.steps steps of the tiny GPT, the memory history recording; the snapshot is taken after the last step, with
    the loop's variables still alive (as a snapshot taken mid-run would find them)."""
    import torch  # here, not at the top: the checker reads KINDS and case() without loading torch

    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.model import build_model, get_config
    from labs.instruments.memory_history import MemoryHistory

    torch.manual_seed(0)
    model = build_model(get_config("tiny")).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    corpus = ensure_corpus(model.cfg.vocab_size)
    data, val = TokenFile.open(corpus), TokenFile.open(corpus, "val")
    kept, val_losses, cache = [], [], {}
    with MemoryHistory(device) as history:
        for step in range(c.steps):
            x, y = data.batch(range(step * c.batch, (step + 1) * c.batch), c.seq, device)
            logits, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if c.kind == "logits":
                kept.append(logits.detach())
            elif c.kind == "losses":
                xv, yv = val.batch(range(step * c.batch, (step + 1) * c.batch), c.seq, device)
                val_losses.append(model(xv, yv)[1])
            elif c.kind == "cache":
                cache[step] = logits.detach().softmax(-1)
        return history.snapshot()


def leak_line(kind: str) -> int | None:
    """The line of train() whose allocations the case keeps (None: the clean case keeps none)."""
    if kind not in LEAKS_AT:
        return None
    lines, first = inspect.getsourcelines(train)
    return first + next(i for i, text in enumerate(lines) if LEAKS_AT[kind] in text)


def saved_bytes(c: Case, device="cpu") -> int:
    """Bytes one step of the case keeps, measured apart from the recording: the logits' bytes (logits, cache), or
    the loss plus every storage its graph saved for backward (losses), the weights and the batch left out (they are
    allocated elsewhere)."""
    import torch

    from labs.common.data import TokenFile, ensure_corpus
    from labs.common.model import build_model, get_config

    cfg = get_config("tiny")
    if c.kind in ("logits", "cache"):
        return c.batch * c.seq * cfg.vocab_size * 4
    if c.kind == "clean":
        return 0
    torch.manual_seed(0)
    model = build_model(cfg).to(device)
    x, y = TokenFile.open(ensure_corpus(cfg.vocab_size)).batch(range(c.batch), c.seq, device)
    elsewhere = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x, y)}
    saved = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in elsewhere:
            saved[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x, y)[1]
    return sum(saved.values()) + loss.untyped_storage().nbytes()


def main(argv=None) -> int:
    from labs.common.dist import DEVICE_CHOICES, pick_device
    from labs.instruments.memory_history import save

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--out", default="runs/lab4/memory", help="folder for KIND.pickle")
    p.add_argument("--device", default="auto", choices=DEVICE_CHOICES, help="auto: a GPU where torch sees one")
    a = p.parse_args(argv)
    c = case(a.kind)
    device, _ = pick_device(a.device)
    path = save(train(c, str(device)), Path(a.out) / f"{a.kind}.pickle")
    print(f"{a.kind}: {c.steps} steps of batch {c.batch} x {c.seq} on {device}; snapshot in {path}\n"
          f"open it in https://pytorch.org/memory_viz, or: python -m labs.lab4_debugging.forensics --memory {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
