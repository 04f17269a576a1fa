"""The checks, one package per lab (checker/labs/labN/), in two sides that never import each other:

  checks.py  the parent side's spec: each check one declaration, written on the evaluator that decides it
             (`@check(...)`): what it proves, which runs it reads, the hint for a failure, and, in the body, the
             threshold and why. Their order is CHECKS' order.
  plan.py    the parent side's entry: grade(h, checks) starts the runs the chosen checks read, in phases, and
             hands them to the evaluators; info(runs) says what was measured beside them.
  tasks.py   the worker side's entry: TASKS, what a run does next to the learner's code (checker/worker.py).
             It never imports checks.py or plan.py: a learner's run holds no threshold and no evaluator.

Other modules of a package are one concept each (a measurement, a set-up both sides share); the wrong solutions
each check must fail are declared beside it in tests/mutants/labN.py (tests/test_mutants.py ties every check to
one). tests/test_layering.py holds the sides apart and the imports free of circles."""
from __future__ import annotations

import importlib
from types import ModuleType


def parent(lab: str) -> ModuleType:
    """The lab's parent side: CHECKS, WORLD_SIZE, grade(h, checks), and what else the lab declares."""
    return importlib.import_module(f"checker.labs.{lab}.plan")


def worker(lab: str) -> ModuleType:
    """The lab's worker side: TASKS, what each run (the learner's or the reference's) does."""
    return importlib.import_module(f"checker.labs.{lab}.tasks")

