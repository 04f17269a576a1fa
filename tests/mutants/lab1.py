"""Lab 1's mutants: one realistic slip each, and the check that must catch it (at least one per TODO)."""
from . import Mutant

STEP = "step.py"
MUTANTS = [
    # seeding.py: seed_everything
    Mutant("seed_ignored", "seeding.py", "    torch.manual_seed(seed)\n", "    torch.manual_seed(0)\n",
           "reproducible", "the seed argument is ignored"),
    Mutant("numpy_not_seeded", "seeding.py", "    np.random.seed(seed)\n", "",
           "reproducible", "NumPy's generator is left unseeded"),
    # step.py: train_step
    Mutant("loss_summed", STEP, "    _, loss = model(inputs, targets)\n",
           "    logits, _ = model(inputs, targets)\n"
           "    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction='sum')\n",
           "step_matches_reference", "the loss is summed over the batch instead of averaged"),
    Mutant("zero_grad_missing", STEP, "    optimizer.zero_grad(set_to_none=True)\n", "",
           "step_matches_reference", "gradients are never cleared: they accumulate across steps"),
    Mutant("zero_grad_after_step", STEP, "    optimizer.zero_grad(set_to_none=True)\n    _, loss",
           "    _, loss", "step_matches_reference", "grads cleared at the end: .grad is empty after the step"),
    Mutant("clip_after_step", STEP,
           "    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n    optimizer.step()\n",
           "    optimizer.step()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n",
           "step_matches_reference", "the gradient is clipped after the optimizer used it"),
    Mutant("no_clip", STEP, "    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n", "",
           "step_matches_reference", "the gradient norm is never clipped"),
    Mutant("clip_value", STEP, "torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)",
           "torch.nn.utils.clip_grad_value_(model.parameters(), grad_clip)",
           "step_matches_reference", "each element clipped instead of the global norm"),
    Mutant("scheduler_twice", STEP, "    scheduler.step()\n", "    scheduler.step()\n    scheduler.step()\n",
           "step_matches_reference", "the scheduler is stepped twice per step"),
    Mutant("scheduler_not_stepped", STEP, "    scheduler.step()\n", "",
           "step_matches_reference", "the scheduler is never stepped: the lr stays at its first value"),
    Mutant("scheduler_before_optimizer", STEP, "    optimizer.step()\n    scheduler.step()\n",
           "    scheduler.step()\n    optimizer.step()\n",
           "step_matches_reference", "the scheduler moves the lr before the optimizer uses it"),
    Mutant("loss_before_step_half", STEP, "    loss.backward()\n", "    (0.5 * loss).backward()\n",
           "step_matches_reference", "the gradient is of half the loss"),
    # meters.py: ThroughputMeter.step, .tokens_per_s
    Mutant("meter_counts_warmup", "meters.py", "            self.t_start = now\n",
           "            self.t_start = now\n            self.tokens += tokens\n",
           "throughput_meter", "the step that opens the window has its tokens counted"),
    Mutant("meter_opens_early", "meters.py", "        if self.steps == self.warmup_steps:\n",
           "        if self.steps == self.warmup_steps - 1:\n",
           "throughput_meter", "the window opens one step early (timing a warm-up step)"),
    Mutant("meter_fixed_warmup", "meters.py", "        if self.steps == self.warmup_steps:\n            self.t_start",
           "        if self.steps == 2:\n            self.t_start",
           "throughput_meter", "warm-up hard-coded to 2 steps, whatever warmup_steps says"),
    Mutant("meter_window_late", "meters.py", "        elif self.steps > self.warmup_steps:\n",
           "        elif self.steps > self.warmup_steps + 1:\n", "throughput_meter",
           "the window's first step is timed but its tokens are not counted"),
    # meters.py: model_state_bytes
    Mutant("bytes_no_step_tensor", "meters.py", "for state in optimizer.state.values() for v in state.values() "
           "if torch.is_tensor(v))", "for state in optimizer.state.values() for v in state.values() "
           "if torch.is_tensor(v) and v.dim() > 0)", "memory_reported",
           "AdamW's per-tensor step counter is not counted"),
    Mutant("bytes_grads_as_params", "meters.py",
           "    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() "
           "if p.grad is not None)\n",
           "    grads = params\n", "memory_reported", "gradients assumed to exist and be as big as the weights"),
    # pipeline.py: make_loader
    Mutant("loader_in_process", "pipeline.py", "batch_sampler=batches, num_workers=2, prefetch_factor=4,",
           "batch_sampler=batches,", "input_pipeline", "the DataLoader prepares batches in the training process"),
    # state.py: save_checkpoint, load_checkpoint
    Mutant("rng_not_saved", "state.py", "    ckpt.set_rng_state(state[\"rng\"])\n", "",
           "resume_exact", "the RNG state is saved but never restored"),
    Mutant("optimizer_not_saved", "state.py", "    optimizer.load_state_dict(state[\"optimizer\"])\n", "",
           "resume_exact", "AdamW's moments are not restored"),
    Mutant("sampler_not_saved", "state.py", "    sampler.load_state_dict(state[\"sampler\"])\n", "",
           "resume_exact", "the data position is not restored: batches repeat"),
    Mutant("scheduler_not_saved", "state.py", "    scheduler.load_state_dict(state[\"scheduler\"])\n", "",
           "resume_exact", "the LR schedule restarts its warm-up"),
    Mutant("step_not_returned", "state.py", "    return state[\"step\"]\n", "    return 0\n",
           "resume_exact", "load_checkpoint returns 0, not the saved step"),
    Mutant("save_written_in_place", "state.py", "    ckpt.atomic_save(state, path)\n",
           "    import torch\n    torch.save(state, path)\n",
           "resume_exact",
           "the checkpoint written in place: a kill mid-write leaves a truncated file and no checkpoint"),
]
