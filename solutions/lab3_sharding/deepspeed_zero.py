"""DeepSpeed ZeRO stages 1-3: the same sharding as zero1.py, zero2.py and fsdp.py, configured instead of written.

    stage 0   DDP: everything replicated, gradients all-reduced
    stage 1   what zero1.py shards
    stage 2   what zero2.py shards
    stage 3   what fsdp.py shards, each layer's parameters gathered as needed

What DeepSpeed really holds, fp32 on CPU (measured by the checker, explained in lab3.ipynb):
stages 1-3 keep an fp32 *master copy* of this rank's parameter partition (4Ψ/N) next to the
model's weights — the copy exists for mixed precision and is kept even when the model is
already fp32 — and free their gradient buffers after the step. Persistent bytes per rank (what
`deepspeed_stages` grades): the weights and the optimizer state of that stage's row of this lab's
README table (fp32 AdamW), plus at stages 1-3 the master partition's 4Ψ/N; gradients not counted.
On CPU: DeepSpeed picks gloo, and its own Adam would need a C++ build (the config can avoid it).
"""
from __future__ import annotations


def ds_config(stage: int, micro_batch: int, lr: float = 3e-3, weight_decay: float = 0.1) -> dict:
    """The DeepSpeed config for ZeRO `stage`, fp32, AdamW with labs.common.optim's hyperparameters
    (make_engine passes its parameter groups, so biases and LayerNorms are not decayed either)."""
    # BEGIN SOLUTION Returns a DeepSpeed config (a plain dict) under which ZeRO stage `stage` trains exactly as the
    #                course's loop does (labs.common.optim: its AdamW and hyperparameters, with this lr and
    #                weight_decay; micro_batch sequences per rank per optimizer step; fp32 throughout), needing nothing
    #                compiled on a CPU. Then stages 0 to 3 give the same losses and differ only in what each rank
    #                holds; at stage 3, between steps, a rank holds only its 1/N of every parameter (16/N bytes per
    #                parameter with weights, master and moments), none kept whole, however small.
    # HINT 1         DeepSpeed builds the optimizer, the sharding and the precision from the config, not from your
    #                code. Which entry decides what is partitioned, which would silently change the numbers
    #                (precision, accumulation, hyperparameters), what would DeepSpeed compile for its own Adam, and
    #                which parameters does stage 3 by default keep whole on every rank?
    # HINT 2         Keys: train_micro_batch_size_per_gpu, gradient_accumulation_steps, optimizer {type, params},
    #                zero_optimization {stage, and at stage 3 its parameter persistence threshold}, fp16 and bf16
    #                {enabled}; AdamW's params accept "torch_adam".
    # HINT 3         train_micro_batch_size_per_gpu, gradient_accumulation_steps 1, an AdamW optimizer (lr, betas
    #                [0.9, 0.95], eps 1e-8, weight_decay, "torch_adam": True), zero_optimization {"stage": stage}
    #                plus "stage3_param_persistence_threshold": 0 at stage 3, fp16 and bf16 disabled.
    # On CPU, "torch_adam": true uses torch's AdamW: nothing to compile. Stage 3 keeps every parameter under
    # stage3_param_persistence_threshold elements (default 1e5) whole on every rank, gathered once after each step:
    # for `tiny` that is all 28 tensors (the largest has 16,384 elements), so without the 0 a rank holds 4 + 16/N
    # bytes per parameter (12 at N = 2: more than stage 2's 10) and stage 3 moves no more bytes than DDP.
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": weight_decay, "torch_adam": True}},
        "zero_optimization": {"stage": stage, **({"stage3_param_persistence_threshold": 0} if stage == 3 else {})},
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
        "steps_per_print": 10**9,
    }
    # END SOLUTION


def make_engine(model, stage: int, micro_batch: int, lr: float = 3e-3):
    """A DeepSpeed engine for ZeRO `stage` configured as ds_config says, whose optimizer sees the course's
    parameter groups (labs.common.optim); returns the engine (call it like the model)."""
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
    # BEGIN SOLUTION Returns a DeepSpeed engine over this model for ZeRO stage `stage`, this micro-batch and this
    #                learning rate, whose optimizer is built over the course's parameter groups (biases and norms not
    #                decayed), so it trains like the course's AdamW; calling the engine runs the model.
    # HINT 1         The engine wraps model, optimizer and sharding together. What must it be handed so that its
    #                optimizer sees the course's groups rather than one decayed group of every parameter?
    # HINT 2         deepspeed.initialize with model, model_parameters and config; it returns a tuple whose first
    #                item is the engine. param_groups and ds_config are at hand.
    # HINT 3         engine, *_ = deepspeed.initialize(model=model, model_parameters=param_groups(model),
    #                config=ds_config(stage, micro_batch, lr)); return engine.
    engine, *_ = deepspeed.initialize(model=model, model_parameters=param_groups(model),
                                      config=ds_config(stage, micro_batch, lr))
    return engine
    # END SOLUTION
