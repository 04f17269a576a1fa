# GENERATED from solutions/lab3_sharding/deepspeed_zero.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""DeepSpeed ZeRO stages 1-3: the same sharding as zero1.py and fsdp.py, configured instead of written.

    stage 0   DDP: everything replicated, gradients all-reduced
    stage 1   optimizer state partitioned               (zero1.py)
    stage 2   + gradients partitioned (reduce-scatter instead of all-reduce)   (zero2.py)
    stage 3   + parameters partitioned, gathered per layer as needed (fsdp.py)

What DeepSpeed really holds, fp32 on CPU (measured by the checker, explained in lab3.ipynb):
stages 1-3 keep an fp32 *master copy* of this rank's parameter partition (4Ψ/N) next to the
model's weights — the copy exists for mixed precision and is kept even when the model is
already fp32 — and free their gradient buffers after the step. Persistent bytes per parameter
per rank (weights + master partition + moments): stages 1-2: 4 + 4/N + 8/N, stage 3: 4/N + 4/N + 8/N.
On CPU: `"torch_adam": true` uses torch's AdamW (nothing to compile) and DeepSpeed picks gloo.
"""
from __future__ import annotations


def ds_config(stage: int, micro_batch: int, lr: float = 3e-3, weight_decay: float = 0.1) -> dict:
    """The DeepSpeed config for ZeRO `stage`, fp32, AdamW with labs.common.optim's hyperparameters
    (make_engine passes its parameter groups, so biases and LayerNorms are not decayed either)."""
    raise NotImplementedError("TODO(lab3): train_micro_batch_size_per_gpu, gradient_accumulation_steps 1, an AdamW "
                              "optimizer (lr, betas [0.9, 0.95], weight_decay, 'torch_adam': True), zero_optimization "
                              "{'stage': stage}, fp16 and bf16 disabled")


def make_engine(model, stage: int, micro_batch: int, lr: float = 3e-3):
    """deepspeed.initialize with ds_config(stage, ...) over labs.common.optim.param_groups(model);
    returns the engine (call it like the model)."""
    import importlib
    import os

    from labs.common.optim import param_groups

    # DeepSpeed picks its accelerator itself; make it follow the device this model is on.
    os.environ.setdefault("DS_ACCELERATOR", next(model.parameters()).device.type)

    import deepspeed  # slow to import: only where DeepSpeed is used

    # (deepspeed.comm re-exports torch under the name `torch`, so fetch the submodule itself)
    ds_comm = importlib.import_module("deepspeed.comm.torch")

    # DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce on first use (~25 s of C++
    # compilation per machine). gloo already does the collectives here; skip the build.
    ds_comm.build_shm_op = lambda: None
    raise NotImplementedError("TODO(lab3): engine, *_ = deepspeed.initialize(model=model, "
                              "model_parameters=param_groups(model), config=ds_config(...)); return engine")
