# GENERATED from solutions/lab7_memory/__init__.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Lab 7 (advanced): fitting a bigger model in memory. The functions the checker calls (the seam) are exported
here; their contracts are in each docstring and in this lab's README."""
from .activations import activation_bytes, activation_terms
from .amp import autocast, train_step
from .fast import predict_speedup
from .fp8 import DelayedScaler, Fp8Linear, to_fp8
from .loss_scale import LossScaler
from .measure import saved_bytes
from .planner import plan_memory, step_bytes
from .recompute import apply_recompute

__all__ = ["activation_bytes", "activation_terms", "apply_recompute", "autocast", "train_step", "LossScaler",
           "plan_memory", "step_bytes", "saved_bytes", "to_fp8", "DelayedScaler", "Fp8Linear",
           "predict_speedup"]
