"""Lab 3's mutants: one realistic slip each, and the check that must catch it."""
from . import Mutant

# save_sharded's publication on rank 0, as the reference writes it (three blind mutants edit it)
PUBLISH = ("        if final.exists():  # saved before (a resumed run again): complete, kept\n"
           "            shutil.rmtree(partial)\n        else:\n            os.replace(partial, final)\n")

MUTANTS = [
    # ZeRO-1 (zero1.py)
    Mutant("partition_smallest_first", "zero1.py", "key=lambda i: -sizes[i]", "key=lambda i: sizes[i]",
           "zero1_memory", "tensors dealt smallest first: the last, largest ones land unevenly"),
    Mutant("zero1_state_not_sharded", "zero1.py",
           'local = [{**g, "params": [p for p in g["params"] if self.owner[id(p)] == self.rank]} '
           'for g in self.param_groups]',
           'local = [{**g, "params": list(g["params"])} for g in self.param_groups]',
           "zero1_memory", "every rank builds moments for every parameter"),
    Mutant("zero1_empty_group_dropped", "zero1.py", "self.optim = optimizer_cls(local, **defaults)",
           'self.optim = optimizer_cls([g for g in local if g["params"]], **defaults)',
           "zero1_equivalence", "a rank that owns no parameter builds an optimizer over nothing and raises"),
    Mutant("zero1_no_broadcast", "zero1.py", "            dist.broadcast(p.data, src=self.owner[id(p)])\n",
           "            pass\n", "zero1_equivalence", "each rank updates only its own parameters; ranks drift apart"),
    # ZeRO-2 (zero2.py)
    Mutant("zero2_allreduce_then_slice", "zero2.py",
           "b.work = dist.reduce_scatter_single(b.flat_grad[b.lo:b.hi], b.flat_grad, async_op=True)",
           "b.work = dist.all_reduce(b.flat_grad, async_op=True)",
           "zero_comm_bytes", "all-reduce the bucket and keep a slice: right numbers, 1.5x DDP's bytes"),
    Mutant("zero2_bucket_per_tensor", "zero2.py", "bucket_cap_mb: float = 25.0", "bucket_cap_mb: float = 0.0",
           "zero2_throughput", "one bucket per tensor: two small collectives per parameter (measured 0.3-0.4x DDP)"),
    Mutant("zero2_no_all_gather", "zero2.py",
           "        works = [dist.all_gather_single(b.flat, b.flat[b.lo:b.hi], async_op=True) for b in self.buckets]\n",
           "        works = []\n", "zero2_equivalence", "parameters not all-gathered after the step"),
    Mutant("zero2_slice_unpadded", "zero2.py", "padded = -(-n // world_size) * world_size", "padded = n",
           "zero2_equivalence", "no padding: an odd-sized bucket's last element belongs to no rank"),
    Mutant("zero2_sum_not_mean", "zero2.py", "        b.flat_grad.div_(self.world_size)\n", "",
           "zero2_equivalence", "gradients summed over ranks, not averaged: every step twice too large"),
    Mutant("zero2_keeps_full_grads", "zero2.py", "b.grad_shard = mine.clone() if b.grad_shard is None",
           "b.grad_shard = mine if b.grad_shard is None",
           "zero2_memory", "the owned slice is a view: it keeps the whole bucket's gradient buffer alive"),
    # FSDP2 (fsdp.py)
    Mutant("fsdp_root_only", "fsdp.py", "    for block in model.blocks:\n        fully_shard(block, **kwargs)\n", "",
           "fsdp_structure", "one FSDP unit for the whole model: every parameter gathered at once"),
    Mutant("fsdp_no_root", "fsdp.py", "    fully_shard(model, **kwargs)\n    return model", "    return model",
           "fsdp_memory", "the root is not wrapped: embeddings and the final norm stay replicated"),
    Mutant("fsdp_no_root_trains_apart", "fsdp.py", "    fully_shard(model, **kwargs)\n    return model",
           "    return model", "fsdp_equivalence", "the root is not wrapped: the embeddings' and final norm's "
           "gradients are never averaged over the ranks, which train apart"),
    Mutant("fsdp_every_leaf", "fsdp.py", "    for block in model.blocks:\n        fully_shard(block, **kwargs)\n",
           "    for sub in model.blocks.modules():\n        if any(True for _ in sub.parameters(recurse=False)):\n"
           "            fully_shard(sub, **kwargs)\n", "throughput",
           "one FSDP unit per layer with weights: many small gathers per block (measured 0.18-0.20x DDP)"),
    Mutant("model_state_bytes_global", "fsdp.py",
           "    params = sum(local_bytes(p) for p in model.parameters())",
           "    params = sum(p.numel() * p.element_size() for p in model.parameters())",
           "fsdp_memory", "a DTensor's numel() is the global size, not the local shard"),
    # DCP (dcp_state.py)
    Mutant("dcp_scheduler_not_restored", "dcp_state.py", '        self.scheduler.load_state_dict(state["scheduler"])\n',
           "", "sharded_resume", "the LR schedule restarts from step 0 after a resume"),
    Mutant("dcp_latest_before_data", "dcp_state.py",
           '    dcp.save({"train": TrainState(model, optimizer, scheduler, sampler, step)}, '
           'checkpoint_id=str(partial))\n'
           '    ckpt.atomic_save({"rng": ckpt.rng_state()}, partial / f"rng-rank{rank}.pt")\n'
           "    dist.barrier()\n"
           "    if rank == 0:\n"
           "        if final.exists():  # saved before (a resumed run again): complete, kept\n"
           "            shutil.rmtree(partial)\n"
           "        else:\n"
           "            os.replace(partial, final)\n"
           '        ckpt.atomic_write_text(final.name, root / "latest")\n',
           "    if rank == 0:  # latest names the new step first; the folder is filled after\n"
           '        ckpt.atomic_write_text(final.name, root / "latest")\n'
           '    dcp.save({"train": TrainState(model, optimizer, scheduler, sampler, step)}, checkpoint_id=str(final))\n'
           '    ckpt.atomic_save({"rng": ckpt.rng_state()}, final / f"rng-rank{rank}.pt")\n',
           "sharded_resume", "latest names the new step's folder before DCP fills it (no temporary folder): a kill "
           "mid-save leaves latest naming shards with no .metadata"),
    # DeepSpeed (deepspeed_zero.py)
    Mutant("deepspeed_stage_fixed", "deepspeed_zero.py", '"zero_optimization": {"stage": stage,',
           '"zero_optimization": {"stage": 2,', "deepspeed_stages",
           "every engine runs ZeRO-2, whatever stage is asked"),
    Mutant("ds_stage3_keeps_small_params_whole", "deepspeed_zero.py",
           '''{"stage": stage, **({"stage3_param_persistence_threshold": 0} if stage == 3 else {})}''',
           '''{"stage": stage}''', "deepspeed_stages",
           "stage 3 at DeepSpeed's default persistence threshold: every small parameter stays whole on every rank "
           "(12 B/param at N = 2 where ZeRO-3 promises 8)"),
    # the memory model (memory_model.py)
    Mutant("memory_model_zero2_shards_weights", "memory_model.py",
           'out = {"weights": w * psi / (n if level >= 3 else 1)',
           'out = {"weights": w * psi / (n if level >= 2 else 1)',
           "memory_model", "ZeRO-2 predicted to shard the weights too: ZeRO-3's count under ZeRO-2's name"),
    # blind: a learner who worked lab 3 from labs/ only broke their own solution these ways; re-expressed here
    Mutant("resume_restores_no_rng", "dcp_state.py", '        ckpt.set_rng_state(ckpt.load(rng)["rng"])\n',
           "        pass\n", "sharded_resume",
           "the resume brings back model, optimizer, scheduler and sampler, but not the RNG: other dropout masks",
           blind=True),
    Mutant("resume_every_rank_rank0_rng", "dcp_state.py", 'rng = folder / f"rng-rank{dist.get_rank()}.pt"',
           'rng = folder / "rng-rank0.pt"', "sharded_resume",
           "every rank loads rank 0's RNG state: rank 1's masks repeat rank 0's", blind=True),
    Mutant("ds_default_betas", "deepspeed_zero.py", '"betas": [0.9, 0.95]', '"betas": [0.9, 0.999]',
           "deepspeed_stages", "DeepSpeed's AdamW at torch's default betas: every stage agrees with stage 0, and none "
           "with the course's step", blind=True),
    Mutant("ds_no_param_groups", "deepspeed_zero.py",
           "\n    engine, *_ = deepspeed.initialize(model=model, model_parameters=param_groups(model),",
           "\n    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),",
           "deepspeed_stages", "the engine's AdamW decays biases and LayerNorms too: not the course's groups",
           blind=True),
    Mutant("zero1_step_drops_kwargs", "zero1.py", "        self.optim.step(**kwargs)\n", "        self.optim.step()\n",
           "zero1_equivalence", "step(**kwargs) accepted and dropped: the wrapped optimizer never sees them",
           blind=True),
    # blind, third session: a learner's slips from the README, starters and the checker's output alone
    Mutant("partition_counts_tensors", "zero1.py", "        load[r] += sizes[i]\n", "        load[r] += 1\n",
           "zero1_memory", "partition balances the number of tensors per rank, not their elements (1.10 and 0.90 of "
           "8Ψ/N on tiny)", blind=True),
    Mutant("zero2_slice_stops_at_real_elements", "zero2.py", "self.lo, self.hi = rank * shard, (rank + 1) * shard",
           "self.lo, self.hi = rank * shard, min((rank + 1) * shard, n)", "zero2_equivalence",
           "the last rank's slice excludes the padding: shorter than P/N, so the reduce-scatter's output does not fit "
           "a padded bucket (gloo aborts)", blind=True),
    Mutant("zero2_reduce_scatter_output_dropped", "zero2.py",
           "dist.reduce_scatter_single(b.flat_grad[b.lo:b.hi], b.flat_grad, async_op=True)",
           "dist.reduce_scatter_single(torch.empty_like(b.flat_grad[b.lo:b.hi]), b.flat_grad, async_op=True)",
           "zero2_equivalence", "the reduce-scatter writes a fresh tensor that is dropped: the owned slice keeps this "
           "rank's own gradient / N, not the mean", blind=True),
    Mutant("zero2_divides_own_slice_only", "zero2.py", "b.flat_grad.div_(self.world_size)",
           "b.flat_grad[b.lo:b.hi].div_(self.world_size)", "zero2_equivalence",
           "only the owned slice is divided by N before the reduce-scatter: the other ranks' contributions to it "
           "arrive undivided", blind=True),
    Mutant("fsdp_blocks_stay_gathered", "fsdp.py",
           "    for block in model.blocks:\n        fully_shard(block, **kwargs)",
           "    for block in model.blocks:\n        fully_shard(block, reshard_after_forward=False, **kwargs)",
           "fsdp_structure", "blocks are not resharded after forward: every block's full weights stay gathered until "
           "backward (482,304 B unsharded at once where 282,368 are allowed)", blind=True),
    Mutant("model_state_bytes_no_step_counters", "fsdp.py", "for v in s.values() if torch.is_tensor(v))",
           'for k, v in s.items() if torch.is_tensor(v) and k != "step")', "fsdp_memory",
           "model_state_bytes leaves out AdamW's step counters (4 B per parameter tensor): 112 B short of the "
           "checker's count", blind=True),
    Mutant("ds_accumulates_two", "deepspeed_zero.py", '"gradient_accumulation_steps": 1,',
           '"gradient_accumulation_steps": 2,', "deepspeed_stages",
           "two micro-batches per optimizer step: every stage agrees with stage 0, none with the course's step",
           blind=True),
    Mutant("save_rng_rank0_only", "dcp_state.py",
           '    ckpt.atomic_save({"rng": ckpt.rng_state()}, partial / f"rng-rank{rank}.pt")',
           '    if rank == 0:\n        ckpt.atomic_save({"rng": ckpt.rng_state()}, partial / f"rng-rank{rank}.pt")',
           "sharded_resume", "only rank 0 saves its RNG: rank 1 resumes with a fresh stream (other dropout masks)",
           blind=True),
    Mutant("dcp_sampler_not_restored", "dcp_state.py", '        self.sampler.load_state_dict(state["sampler"])\n', "",
           "sharded_resume", "the sampler is saved but not restored: the resumed run replays the epoch's first "
           "batches", blind=True),
    Mutant("dcp_step_not_restored", "dcp_state.py", '        self.step = state["step"]\n', "", "sharded_resume",
           "load_state_dict never sets the step: load_sharded returns 0 after a resume", blind=True),
    # blind, third session's survivors, caught since: each by a general check of the contract it broke
    Mutant("z1_partition_unsorted", "zero1.py",
           "for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):", "for i in range(len(sizes)):",
           "zero1_memory", "partition deals tensors in the given order, not largest first", blind=True),
    Mutant("z1_added_group_not_local", "zero1.py",
           '        self.optim.add_param_group({**group, "params": [q for q in group["params"] '
           'if self.owner[id(q)] == self.rank]})\n', "",
           "zero1_equivalence", "add_param_group deals the new group but never hands this rank's share to the local "
           "optimizer", blind=True),
    Mutant("z2_pad_always", "zero2.py", "padded = -(-n // world_size) * world_size",
           "padded = (n // world_size + 1) * world_size",
           "zero2_memory", "a bucket already a multiple of N gets N zeros of padding", blind=True),
    Mutant("z2_flat_default_dtype", "zero2.py",
           "self.flat = torch.zeros(padded, dtype=params[0].dtype, device=params[0].device)",
           "self.flat = torch.zeros(padded, device=params[0].device)",
           "zero2_equivalence", "the flat buffer takes torch's default dtype, not the parameters'", blind=True),
    Mutant("z2_rs_waits_in_backward", "zero2.py",
           "b.work = dist.reduce_scatter_single(b.flat_grad[b.lo:b.hi], b.flat_grad, async_op=True)",
           "b.work = dist.reduce_scatter_single(b.flat_grad[b.lo:b.hi], b.flat_grad, async_op=True)\n"
           "        b.work.wait()",
           "zero2_throughput", "each bucket's reduce-scatter is waited on inside the backward hook: no overlap",
           blind=True),
    Mutant("z2_step_no_wait", "zero2.py", "        for w in works:\n            w.wait()\n", "",
           "zero2_equivalence", "step returns with the all-gathers still in flight", blind=True),
    Mutant("z2_unused_param_stepped", "zero2.py",
           "piece.grad = None if b.grad_shard is None or pid not in self.used else b.grad_shard[start:end]",
           "piece.grad = None if b.grad_shard is None else b.grad_shard[start:end]",
           "zero2_equivalence", "a parameter that got no gradient this step gets a zero gradient and is stepped",
           blind=True),
    Mutant("fsdp_mp_root_only", "fsdp.py",
           "    for block in model.blocks:\n        fully_shard(block, **kwargs)",
           "    for block in model.blocks:\n        fully_shard(block)",
           "fsdp_structure", "the blocks get no mixed-precision policy: only the root computes in bf16", blind=True),
    Mutant("dcp_latest_not_atomic", "dcp_state.py",
           'ckpt.atomic_write_text(final.name, root / "latest")', '(root / "latest").write_text(final.name)',
           "sharded_resume", "latest is rewritten in place: a kill between truncate and write leaves it empty",
           blind=True),
    Mutant("dcp_optim_positional", "dcp_state.py", '"optim": optim_sd,', '"optim": self.optimizer.state_dict(),',
           "sharded_resume", "the optimizer state is saved keyed by position, not by fully qualified name",
           blind=True),
    Mutant("dcp_rng_required", "dcp_state.py", "    if rng.exists():\n        ckpt.set_rng_state",
           "    if True:\n        ckpt.set_rng_state",
           "sharded_resume", "every rank demands its RNG file: a rank new since the save fails to resume", blind=True),
    # blind, fourth session: wrong saves and loads that passed sharded_resume, caught since
    Mutant("dcp_no_temporary_folder", "dcp_state.py",
           'checkpoint_id=str(partial))\n    ckpt.atomic_save({"rng": ckpt.rng_state()}, '
           'partial / f"rng-rank{rank}.pt")\n    dist.barrier()\n    if rank == 0:\n' + PUBLISH,
           'checkpoint_id=str(final))\n    ckpt.atomic_save({"rng": ckpt.rng_state()}, final / f"rng-rank{rank}.pt")\n'
           "    dist.barrier()\n    if rank == 0:\n",
           "sharded_resume", "the checkpoint is written straight into its final folder and latest moved after it: the "
           "kill leaves step-NNNNNN with shards and no .metadata, which the resume never read", blind=True),
    Mutant("dcp_latest_before_rename", "dcp_state.py",
           PUBLISH + '        ckpt.atomic_write_text(final.name, root / "latest")\n',
           '        ckpt.atomic_write_text(final.name, root / "latest")\n'
           "        if final.exists():\n            shutil.rmtree(partial)\n        else:\n"
           "            os.replace(partial, final)\n",
           "sharded_resume", "latest is pointed at the new folder before the folder is renamed into place: a kill "
           "between the two leaves latest naming nothing", blind=True),
    Mutant("dcp_new_rank_takes_old_rng", "dcp_state.py", 'rng = folder / f"rng-rank{dist.get_rank()}.pt"',
           'rng = folder / f"rng-rank{dist.get_rank() % 2}.pt"', "sharded_resume",
           "at a larger world size the new ranks load an old rank's RNG file: ranks 0 and 2 draw the same masks",
           blind=True),
    Mutant("dcp_resave_moves_old_aside", "dcp_state.py",
           PUBLISH,
           "        if final.exists():\n            os.replace(final, final.with_name(final.name + \".old\"))\n"
           "        os.replace(partial, final)\n"
           "        shutil.rmtree(final.with_name(final.name + \".old\"), ignore_errors=True)\n",
           "sharded_resume", "a second save of a step renames the complete folder aside, then the new one in: a kill "
           "between the two leaves latest naming nothing", blind=True),
    Mutant("dcp_no_barrier_before_rename", "dcp_state.py",
           'partial / f"rng-rank{rank}.pt")\n    dist.barrier()\n', 'partial / f"rng-rank{rank}.pt")\n',
           "sharded_resume", "rank 0 renames the folder without waiting for the other ranks' RNG files: passes "
           "unless the race fires", blind=True),
    Mutant("zero1_step_all_reduces", "zero1.py", "            dist.broadcast(p.data, src=self.owner[id(p)])\n",
           "            p.data.mul_(self.owner[id(p)] == self.rank)\n            dist.all_reduce(p.data)\n",
           "zero_comm_bytes", "non-owners zero their copy and every parameter is all-reduced: the right weights for "
           "twice the broadcasts' bytes", blind=True),
    Mutant("partition_ties_to_highest", "zero1.py", "        r = min(range(world_size), key=lambda r: load[r])\n",
           "        r = min(reversed(range(world_size)), key=lambda r: load[r])\n", "zero1_memory",
           "a tie in load goes to the highest rank: as balanced, other owners than the contract's", blind=True),
    Mutant("zero1_one_local_group", "zero1.py",
           'local = [{**g, "params": [p for p in g["params"] if self.owner[id(p)] == self.rank]} '
           'for g in self.param_groups]',
           'local = [{**self.param_groups[0], "params": [p for g in self.param_groups for p in g["params"] '
           'if self.owner[id(p)] == self.rank]}]', "zero1_equivalence",
           "one local group for all the outer groups: the second group's lr and weight decay never reach its "
           "parameters", blind=True),
    # blind, for tasks added to the starter: written from labs/ and solutions/, never checker/
    Mutant("added_group_dealt_round_robin", "zero1.py",
           '"params": [q for q in group["params"] if self.owner[id(q)] == self.rank]}',
           '"params": group["params"][self.rank::self.world_size]}', "zero1_equivalence",
           "the late group's tensors dealt round-robin to the local optimizer, not by self.owner: a rank steps what "
           "another rank broadcasts", blind=True),
]
