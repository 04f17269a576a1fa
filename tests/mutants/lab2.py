"""Lab 2's mutants: one realistic slip each, and the check that must catch it (at least one per TODO)."""
from . import Mutant

STEP, BUCKETED = "step.py", "bucketed.py"
_SAVE_ORDER = """    ckpt.atomic_save({"rng": ckpt.rng_state(), "step": step}, mine)
    dist.barrier()
    if rank == 0:
        ckpt.atomic_save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                          "scheduler": scheduler.state_dict(), "sampler": sampler.state_dict(),
                          "step": step, "world_size": dist.get_world_size()}, path)
    dist.barrier()
"""
_FILL = ("        for p in reversed(params):\n"
         "            current, size = open_.pop(p.dtype, ([], 0))\n"
         "            current.append(p)\n"
         "            size += p.numel() * p.element_size()\n"
         "            if size >= cap_bytes:\n"
         "                buckets.append(Bucket(current))\n"
         "            else:\n"
         "                open_[p.dtype] = (current, size)\n")

MUTANTS = [
    # naive.py: broadcast_module, NaiveDDP.finish_gradient_synchronization
    Mutant("no_broadcast", "naive.py", "            dist.broadcast(t.data, src=src)\n", "            pass\n",
           "ranks_in_sync", "the initial weights are never broadcast: ranks start apart and stay apart"),
    Mutant("naive_sum_not_mean", "naive.py", "                p.grad.div_(self.world_size)\n", "",
           "grad_equivalence", "NaiveDDP sums the gradients instead of averaging them"),
    # bucketed.py: _make_buckets, _grad_ready, finish_gradient_synchronization
    Mutant("last_bucket_dropped", BUCKETED,
           "        buckets.extend(Bucket(current) for current, _ in open_.values())\n", "",
           "grad_equivalence", "the parameters left over after the last full bucket are never all-reduced"),
    Mutant("bucket_sum_not_mean", BUCKETED, "            b.flat.div_(self.world_size)\n", "",
           "grad_equivalence", "BucketedDDP sums the gradients instead of averaging them"),
    Mutant("blocking_all_reduce", BUCKETED, "            b.work = dist.all_reduce(b.flat, async_op=True)\n",
           "            b.work = dist.all_reduce(b.flat, async_op=True)\n            b.work.wait()\n",
           "overlap", "the hook waits for its bucket's all-reduce: backward stalls on every bucket"),
    Mutant("bucket_per_tensor", BUCKETED, "bucket_cap_mb: float = 25.0", "bucket_cap_mb: float = 0.0",
           "throughput", "every gradient tensor is a bucket of its own: one all-reduce per tensor, each paying "
           "the per-call latency buckets exist to amortise"),
    Mutant("hook_ignores_no_sync", BUCKETED, "        if not self.sync:\n            return\n", "",
           "no_sync_accumulation", "the grad hook all-reduces inside no_sync() too"),
    Mutant("bucket_not_reset", BUCKETED,
           "                p.grad = b.flat[off: off + p.numel()].view_as(p)\n            b.reset()\n",
           "                p.grad = b.flat[off: off + p.numel()].view_as(p)\n",
           "grad_equivalence", "buckets are not reset: from step 2 on nothing is launched and old results are read"),
    Mutant("grad_not_written_back", BUCKETED, "                p.grad = b.flat[off: off + p.numel()].view_as(p)\n",
           "                pass\n", "grad_equivalence", "the averaged buffer is never written back to .grad"),
    # sharding.py: ShardedSampler.next_ids, set_epoch
    Mutant("strided_shards", "sharding.py",
           "        return global_ids[self.rank * self.local_batch: (self.rank + 1) * self.local_batch]\n",
           "        return global_ids[self.rank::self.world_size]\n",
           "sharding", "rank r takes every world-th id: disjoint, but not the rank-ordered blocks of the global batch"),
    Mutant("set_epoch_keeps_cursor", "sharding.py", "        self.epoch, self.cursor = epoch, 0\n",
           "        self.epoch = epoch\n", "sharding", "set_epoch does not rewind the cursor"),
    # state.py: save_checkpoint, load_checkpoint
    Mutant("rank0_rng_everywhere", "state.py",
           "    ckpt.set_rng_state(ckpt.load(rng_path(path, dist.get_rank(), state[\"step\"]))[\"rng\"])\n",
           "    ckpt.set_rng_state(ckpt.load(rng_path(path, 0, state[\"step\"]))[\"rng\"])\n",
           "resume_exact", "every rank restores rank 0's RNG state: rank 1's dropout masks change"),
    Mutant("sampler_not_restored", "state.py", "    sampler.load_state_dict(state[\"sampler\"])\n", "",
           "resume_exact", "the data position is not restored"),
    Mutant("optimizer_not_restored", "state.py", "    optimizer.load_state_dict(state[\"optimizer\"])\n", "",
           "resume_exact", "AdamW's moments are not restored"),
    Mutant("main_file_written_in_place", "state.py", "        ckpt.atomic_save({\"model\": model.module.state_dict(),",
           "        import torch\n        torch.save({\"model\": model.module.state_dict(),",
           "resume_exact", "rank 0 writes the main file in place: a kill mid-write leaves a truncated file and no "
           "checkpoint"),
    Mutant("rng_file_not_per_step", "state.py", "rng-rank{rank}-step{step}{path.suffix}", "rng-rank{rank}{path.suffix}",
           "resume_exact", "one RNG file per rank, overwritten by each save: a kill before the main file is replaced "
           "leaves the previous step's main file with the new step's RNG streams"),
    # step.py: train_step
    Mutant("loss_not_divided_by_k", STEP, "            (loss / k).backward()\n", "            loss.backward()\n",
           "step_matches_reference", "the accumulated gradient is the sum over micro-batches, not the mean"),
    Mutant("no_sync_unused", STEP, "        with model.no_sync() if i < k - 1 else nullcontext():\n",
           "        with nullcontext():\n", "step_matches_reference",
           "every micro-step communicates (and the wrapper's buckets see k backward passes)"),
    Mutant("clip_before_sync", STEP,
           "    if finish is not None:\n        finish()\n"
           "    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n",
           "    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n"
           "    if finish is not None:\n        finish()\n",
           "step_matches_reference", "each rank clips its local gradient before the average"),
    Mutant("returns_last_micro_loss", STEP, "    return (total / k).item()\n", "    return loss.item()\n",
           "step_matches_reference", "returns the last micro-batch's loss, not the step's mean"),
    Mutant("scheduler_twice", STEP, "    scheduler.step()\n", "    scheduler.step()\n    scheduler.step()\n",
           "step_matches_reference", "the scheduler is stepped twice per optimizer step"),
    Mutant("zero_grad_missing", STEP, "    optimizer.zero_grad(set_to_none=True)\n", "",
           "step_matches_reference", "gradients of the previous step are accumulated into this one"),
    # blind: written from the lab's README, starters and the checker's output only (never checker/): each TODO worked,
    # then broken the way a learner does. The ones every check passed are listed for the grader's owner in the
    # branch's SURVIVORS.md, not here.
    Mutant("naive_reduce_to_rank0", "naive.py", "                dist.all_reduce(p.grad)\n",
           "                dist.reduce(p.grad, dst=0)\n", "ranks_in_sync",
           "reduce instead of all-reduce: only rank 0 gets the sum, the other ranks step on their own gradient",
           blind=True),
    Mutant("naive_reduces_a_copy", "naive.py", "                dist.all_reduce(p.grad)\n",
           "                dist.all_reduce(p.grad.clone())\n", "grad_equivalence",
           "the all-reduce runs on a copy whose result is dropped: each rank keeps its local gradient / N",
           blind=True),
    Mutant("broadcast_a_copy", "naive.py", "            dist.broadcast(t.data, src=src)\n",
           "            dist.broadcast(t.detach().clone(), src=src)\n", "ranks_in_sync",
           "rank 0's weights broadcast into a temporary copy: the module's own tensors are never overwritten",
           blind=True),
    Mutant("divide_while_in_flight", BUCKETED,
           "            b.flat.div_(self.world_size)\n            b.work = dist.all_reduce(b.flat, async_op=True)\n",
           "            b.work = dist.all_reduce(b.flat, async_op=True)\n            b.flat.div_(self.world_size)\n",
           "grad_equivalence", "the buffer divided after its async all-reduce started: a write into a tensor in flight",
           blind=True),
    Mutant("launch_one_early", BUCKETED, "        if b.ready == len(b.params):\n",
           "        if b.ready == len(b.params) - 1:\n", "grad_equivalence",
           "the bucket launches when all but one gradient is in: the last one is copied into a buffer in flight",
           blind=True),
    Mutant("finish_no_wait", BUCKETED, "?\")\n            b.work.wait()\n", "?\")\n", "grad_equivalence",
           "finish never waits for the all-reduces: the gradients are read while still in flight", blind=True),
    Mutant("no_sync_on_first_not_last", STEP, "        with model.no_sync() if i < k - 1 else nullcontext():\n",
           "        with model.no_sync() if i > 0 else nullcontext():\n", "step_matches_reference",
           "the first micro-step communicates and the last does not: the final accumulated gradient is never averaged",
           blind=True),
    Mutant("loss_over_world_too", STEP, "            (loss / k).backward()\n",
           "            (loss / (k * torch.distributed.get_world_size())).backward()\n", "step_matches_reference",
           "the loss also divided by the world size: the wrapper already averages, so the gradient is 1/N too small",
           blind=True),
    Mutant("returns_micro_loss_sum", STEP, "    return (total / k).item()\n", "    return total.item()\n",
           "step_matches_reference", "returns the sum of the micro-batch losses, not their mean", blind=True),
    Mutant("loss_all_reduced_for_log", STEP, "    return (total / k).item()\n",
           "    mean = total / k\n    torch.distributed.all_reduce(mean)\n"
           "    return (mean / torch.distributed.get_world_size()).item()\n",
           "step_matches_reference",
           "returns the global mean loss: an extra all-reduce per step, and not this rank's loss", blind=True),
    Mutant("sampler_seed_per_rank", "sharding.py",
           "        super().__init__(num_windows, batch_size * world_size, seed)\n",
           "        super().__init__(num_windows, batch_size * world_size, seed + rank)\n", "sharding",
           "each rank shuffles with its own seed: the ranks' blocks overlap and miss windows", blind=True),
    Mutant("set_epoch_ignores_epoch", "sharding.py", "        self.epoch, self.cursor = epoch, 0\n",
           "        self.cursor = 0\n", "sharding", "set_epoch rewinds but keeps the old epoch's order", blind=True),
    Mutant("old_rng_removed_first", "state.py", _SAVE_ORDER,
           """    for old in Path(path).parent.glob(f"{Path(path).stem}.rng-rank{rank}-step*{Path(path).suffix}"):
        if old != mine:
            old.unlink()
""" + _SAVE_ORDER, "resume_exact", "each rank deletes its older RNG files before the new main file is in place: a "
           "kill inside the main file's write leaves the previous main file without its RNG files", blind=True),
    # blind survivors made a check: bucket_layout compares every bucket with the checker's own layout
    Mutant("buckets_forward_order", "bucketed.py", "        for p in reversed(params):\n",
           "        for p in params:\n", "bucket_layout",
           "buckets filled in registration order, not backward's: the first to fill is the embedding's", blind=True),
    Mutant("bucket_cap_strict", "bucketed.py", "            if size >= cap_bytes:\n",
           "            if size > cap_bytes:\n", "bucket_layout",
           "a bucket that reaches the cap exactly stays open (closed only above it)", blind=True),
    Mutant("bucket_cap_never_exceeded", "bucketed.py", _FILL,
           "        for p in reversed(params):\n"
           "            current, size = open_.pop(p.dtype, ([], 0))\n"
           "            nbytes = p.numel() * p.element_size()\n"
           "            if current and size + nbytes > cap_bytes:\n"
           "                buckets.append(Bucket(current))\n"
           "                current, size = [], 0\n"
           "            current.append(p)\n"
           "            open_[p.dtype] = (current, size + nbytes)\n", "bucket_layout",
           "a bucket closed before it would exceed the cap, not once it reaches it", blind=True),
    Mutant("buckets_mix_dtypes", "bucketed.py", _FILL,
           _FILL.replace("open_.pop(p.dtype,", "open_.pop(None,").replace("open_[p.dtype] =", "open_[None] ="),
           "bucket_layout", "one open bucket for every dtype: a bf16 gradient lands in an fp32 buffer", blind=True),
    # blind survivors made checks: grad_equivalence finds each BucketedDDP .grad inside its bucket's buffer; throughput
    # reads the bucket cap of the wrapper the learner's make_torch_ddp builds
    Mutant("grad_copied_not_viewed", BUCKETED, "                p.grad = b.flat[off: off + p.numel()].view_as(p)\n",
           "                p.grad.copy_(b.flat[off: off + p.numel()].view_as(p))\n", "grad_equivalence",
           "the averaged buffer copied into the old .grad instead of .grad becoming its view", blind=True),
    Mutant("torch_ddp_default_buckets", "torch_ddp.py", ", bucket_cap_mb=bucket_cap_mb)", ")", "throughput",
           "bucket_cap_mb is not passed on: torch DDP keeps its 25 MB buckets", blind=True),
    # blind survivor made a check: resume_exact kills a second run inside the first write after the weights' file
    Mutant("main_file_before_rng", "state.py", _SAVE_ORDER,
           """    if rank == 0:
        ckpt.atomic_save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                          "scheduler": scheduler.state_dict(), "sampler": sampler.state_dict(),
                          "step": step, "world_size": dist.get_world_size()}, path)
    ckpt.atomic_save({"rng": ckpt.rng_state(), "step": step}, mine)
    dist.barrier()
""", "resume_exact", "rank 0 writes the main file before the ranks write their RNG files: a kill between the two "
           "leaves a main file naming a step whose RNG files do not exist", blind=True),
    # blind, for tasks added to the starter: written from labs/ and solutions/, never checker/
    Mutant("sampler_seeded_per_rank", "sharding.py",
           "        super().__init__(num_windows, batch_size * world_size, seed)\n",
           "        super().__init__(num_windows, batch_size * world_size, seed + rank)\n", "sharding",
           "each rank seeds its sampler with seed + rank: the ranks shuffle differently, so their batches overlap",
           blind=True),
]
