"""Lab 10, what the checker counts beneath the learner's layer: the ops it runs, the matmuls among them.

A dispatch mode sees every aten op, inside autograd Functions and loops alike. "Grouped" compute is a count that
does not grow with the tokens: an expert's rows go through one matmul per weight, so a forward of E experts runs
2E matmuls (+ the router's) whatever T is, and keep_mask's op count stays the same at T and 3T. A Python loop over
tokens runs ops in proportion to T; an expert run once per source rank, N times more matmuls.
"""
from __future__ import annotations

MATMULS = ("mm", "bmm", "addmm", "baddbmm")


class OpCounter:
    def __init__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        mm = {getattr(torch.ops.aten, n).default for n in MATMULS}
        counter = self
        self.ops = self.matmuls = 0

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counter.ops += 1
                counter.matmuls += func in mm
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
