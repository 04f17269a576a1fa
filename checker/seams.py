"""The seam: the only learner functions the checker calls, per lab, with their contracts.

Learners may restructure everything else. Each lab's README repeats its part of this table.
The checker imports `labs.<folder>` or `solutions.<folder>` (the target switch) and finds
these names there; notebooks use the same switch (COURSE_TARGET=labs|solutions).
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

# The course's own packages under labs/, not exercises: the training core, the instruments that measure a run,
# the notebook UI. A learner's tree links the course's copies in (link_shared), learner code may import them,
# and a graded run must leave them unchanged (checker/sandbox.py's digest).
SHARED = ("common", "instruments", "notebook")


def link_shared(labs_dir: Path, root: Path | None = None) -> None:
    """Make labs_dir/<package> a link to the course's own copy, for every shared package."""
    root = Path(root) if root else Path(__file__).resolve().parents[1]
    for package in SHARED:
        if not os.path.lexists(labs_dir / package):
            (labs_dir / package).symlink_to(root / "labs" / package)


def is_shared(module: str) -> bool:
    """Is `module` (a dotted name) part of a shared package?"""
    return any(module == f"labs.{p}" or module.startswith(f"labs.{p}.") for p in SHARED)


@dataclass(frozen=True)
class Seam:
    lab: str
    folder: str
    title: str
    functions: dict[str, str]  # name -> contract, one line
    uses: tuple[str, ...] = ()  # earlier labs' folders whose code the learner's runs import (lab 5's job: 1 and 2)


SEAMS: dict[str, Seam] = {
    "lab1": Seam("lab1", "lab1_baseline", "Single-device baseline", {
        "seed_everything": "seed_everything(seed) -> None; same seed, same run, bit for bit, in a fresh process",
        "train_step": "train_step(model, optimizer, scheduler, (x, y)) -> float loss; zero grads first, "
                      "one optimizer and one scheduler step; .grad holds this step's gradient afterwards",
        "ThroughputMeter": "ThroughputMeter(device, warmup_steps=2); .step(tokens) after each step; "
                           ".tokens_per_s over the window after warm-up (device synchronised)",
        "model_state_bytes": "model_state_bytes(model, optimizer) -> {params, grads, optimizer, total} "
                             "bytes counted from the tensors",
        "save_checkpoint": "save_checkpoint(path, model, optimizer, scheduler, sampler, step); full "
                           "training state, written atomically",
        "load_checkpoint": "load_checkpoint(path, model, optimizer, scheduler, sampler) -> step",
        "make_loader": "make_loader(dataset, batches, device) -> iterable of (x, y) (B, T) on device, in the order "
                       "of `batches` (lists of sample indices); keeps the model fed while samples cost CPU time",
    }),
    "lab2": Seam("lab2", "lab2_ddp", "Data parallelism", {
        "ShardedSampler": "ShardedSampler(num_windows, batch_size, rank, world_size, seed); .next_ids() this "
                          "rank's block of the global batch; .set_epoch(e); state_dict()/load_state_dict()",
        "NaiveDDP": "NaiveDDP(module): broadcast at init; finish_gradient_synchronization() averages every .grad",
        "BucketedDDP": "BucketedDDP(module, bucket_cap_mb): async bucket all-reduces from grad hooks; "
                       "no_sync(); finish_gradient_synchronization() waits and writes the averages to .grad",
        "train_step": "train_step(ddp_model, optimizer, scheduler, micro_batches) -> float; no_sync on all "
                      "but the last micro-step",
        "save_checkpoint": "save_checkpoint(path, ddp_model, optimizer, scheduler, sampler, step); every rank calls it",
        "load_checkpoint": "load_checkpoint(path, ddp_model, optimizer, scheduler, sampler) -> step; every rank",
    }),
    "lab3": Seam("lab3", "lab3_sharding", "Sharding: ZeRO, FSDP2, DeepSpeed", {
        "bytes_per_rank": "bytes_per_rank(psi, world_size, strategy, precision, optimizer) -> {weights, grads, "
                          "optimizer, total}: the ZeRO paper's model-state bytes per rank (memory_model.py)",
        "partition": "partition(sizes, world_size, loads=None) -> owner rank per tensor: whole tensors, as even as "
                     "greedy largest-first dealing allows",
        "ShardedOptimizer": "ShardedOptimizer(params or groups, optimizer_cls, **defaults); .optim holds this "
                            "rank's state only; after .step() every rank holds every owner's updated params",
        "Zero2Optimizer": "Zero2Optimizer(params or groups, optimizer_cls, bucket_cap_mb=25.0, **defaults); a "
                          "torch.optim.Optimizer; the model stays plain: reduce-scatter of flat padded buckets in "
                          "backward, .optim steps this rank's slices, .step() all-gathers the buckets",
        "apply_fsdp": "apply_fsdp(model, mixed_precision=False) -> the same model, FSDP2-sharded; at most the root "
                      "and one block unsharded at once",
        "model_state_bytes": "model_state_bytes(model, optimizer) -> {params, grads, optimizer, total}, local shards",
        "save_sharded": "save_sharded(root, model, optimizer, scheduler, sampler, step) with DCP; every rank",
        "load_sharded": "load_sharded(root, model, optimizer, scheduler, sampler) -> step, at any world size",
        "make_engine": "make_engine(model, stage, micro_batch) -> a DeepSpeed engine for ZeRO stage 0-3",
    }),
    "lab4": Seam("lab4", "lab4_debugging", "Debugging distributed failures", {
        "join": "join(timeout_s) -> DistEnv; every rank, first: the process group the launcher described",
        "skip_step": "skip_step(loss, step, device) -> bool; every rank, after backward: skip this update on all "
                     "ranks or none",
        "after_step": "after_step(model, step, job, data, env) -> val loss or None; the dashboard's validation "
                      "every job.eval_every steps",
        "shard_indices": "shard_indices(n, rank, world) -> list[int]; this rank's samples of an epoch",
        "save_checkpoint": "save_checkpoint(path, ddp, optimizer, step); every rank",
        "load_checkpoint": "load_checkpoint(path, ddp, optimizer) -> step; every rank; the next step must equal "
                           "the uninterrupted run's",
        "configure_network": "configure_network(master_addr) -> None; every rank, before join: the interface to use",
        "launch_args": "launch_args(nproc) -> [torchrun options]; jobs must coexist on one node",
        "train_step": "train_step(ddp, optimizer, micro_batches) -> float; .grad = the global batch's mean gradient",
        "Job": "Job(**settings): one run's settings (steps, sizes, the incident's conditions); the checker sets them",
        "run": "run(job, on_saved=None) -> {losses, model, env, ...}; every rank: the whole job, calling the "
               "functions above through their incidentN modules (so the checker can time after_step and train_step)",
        "find_desync": "find_desync(dump_paths) -> {rank, seq, kind}; flight-recorder dumps (one per rank, file "
                       "names ending in the rank): the rank that diverged, the first collective_seq_id where the ranks "
                       "disagree, and 'op' | 'size' | 'dtype' | 'missing'",
        "slow_rank": "slow_rank(trace_paths) -> {rank, gbps}; linkprobe.py's profiler traces, one per rank: the rank "
                     "whose link is slow and its rate in GB/s (10^9 bytes/s)",
        "find_memory_leak": "find_memory_leak(snapshot, source) -> {file, line, bytes_per_step} or None; a memory "
                            "snapshot (torch.cuda.memory._snapshot()'s dict) of the training script `source`: the line "
                            "whose allocations stay alive and grow every step, and the bytes each step adds",
    }),
    "lab5": Seam("lab5", "lab5_scheduler", "Training under a scheduler: Slurm and Kubernetes", {
        "train.sbatch": "the batch script (a file, not a function): #SBATCH --requeue, --open-mode=append, "
                        "--signal=B:USR1@N; srun + torchrun with the rendezvous from SLURM_*; USR1 -> the ranks "
                        "checkpoint and stop -> the job requeues itself; reads LAB5_RUNS, LAB5_PYTHON, "
                        "LAB5_TRAIN_ARGS, LAB5_WORLD_SIZES, COURSE_TARGET",
        "PreemptionFlag": "PreemptionFlag().install(); .should_stop(device) -> bool, a collective: True on every "
                          "rank once any rank got SIGUSR1/SIGTERM",
        "resume": "resume(ckpt_path, restart_count, ddp, optimizer, scheduler, sampler) -> step to continue from",
        "submit_sweep": "submit_sweep(world_sizes, runs, train_args) -> the array job id; one job per world size, "
                        "one at a time",
        "collect": "collect(jobcomp_path, runs_dir) -> rows (COLUMNS) for every finished job with a folder in runs_dir",
        "write_csv": "write_csv(rows, path) -> path",
        "scaling_table": "scaling_table(rows) -> [{world_size, tokens_per_s, speedup, efficiency, jobs}] ascending",
        "write_report": "write_report(csv_path, out_dir) -> (png path, markdown path)",
    }, uses=("lab1_baseline", "lab2_ddp")),
    "lab6": Seam("lab6", "lab6_model_parallel", "Model parallelism: tensor and pipeline", {
        "parallelize": "parallelize(model, group=None) -> model; in place: every block's attention split by heads and "
                       "MLP by hidden units (column- then row-parallel), parameter names unchanged, each this rank's "
                       "shard",
        "parallelize_dtensor": "parallelize_dtensor(model, mesh) -> model; the same split with parallelize_module "
                               "(ColwiseParallel/RowwiseParallel) on a 1-D DeviceMesh",
        "split_stages": "split_stages(model, stage, n_stages) -> nn.Module; this rank's contiguous blocks "
                        "(+ embeddings first, ln_f + head last) built from the model's own modules; one tensor in, "
                        "one out",
        "sync_tied_grads": "sync_tied_grads(stage) -> None; every rank, after backward: first and last stage sum the "
                           "tied embedding/head gradient",
        "pipeline_step": "pipeline_step(stage, micro_batches, loss_fn, act_shape, schedule='gpipe'|'1f1b') -> last "
                         "stage's per-micro-batch losses; send/recv between ranks; .grad = the mean loss's gradient",
        "torch_schedule": "torch_schedule(stage, n_micro, loss_fn, device, schedule='gpipe'|'1f1b') -> a "
                          "torch.distributed.pipelining schedule; the checker calls .step(x) / .step(target=y, "
                          "losses=[])",
    }),
    "lab7": Seam("lab7", "lab7_memory", "Fitting in memory: activations, recomputation, mixed precision", {
        "activation_bytes": "activation_bytes(cfg, batch, seq, precision='fp32'|'bf16', recompute='none'|'selective'|"
                            "'full') -> int; bytes one Block keeps for backward on the CPU, training mode",
        "apply_recompute": "apply_recompute(model, mode='full'|'selective') -> model; in place, every block of "
                           "model.blocks recomputed in backward (non-reentrant checkpoint); names unchanged",
        "autocast": "autocast(device_type, precision='bf16'|'fp16'|'fp32') -> a context manager for forward + loss",
        "train_step": "train_step(model, optimizer, (x, y), precision='fp32', scaler=None) -> float loss; "
                      "parameters stay fp32; with a scaler: scaled backward, scaler.step(optimizer), scaler.update()",
        "LossScaler": "LossScaler(init_scale=2**16, growth_factor=2, backoff_factor=0.5, growth_interval=2000); "
                      ".scale(loss), .step(optimizer) -> bool (skipped on inf/NaN), .update(), .get_scale()",
        "plan_memory": "plan_memory(cfg, n_params, batch, seq, world_size, budget_bytes, precision='fp32') -> "
                       "{micro_batch, grad_accum, recompute, zero_stage, bytes, total, fits}: the first that fits",
        "to_fp8": "to_fp8(x, scale, dtype) -> x*scale cast to float8_e4m3fn / float8_e5m2, saturated at the format's "
                  "largest finite value",
        "DelayedScaler": "DelayedScaler(dtype, history=16, margin=0); .cast(x) -> (fp8 tensor, scale used): the scale "
                         "from the previous calls' amax history, then amax(x) recorded; .scale, .amax_history",
        "Fp8Linear": "Fp8Linear(weight, history=16, margin=0): y = x w^T with x, w cast e4m3 and the gradient e5m2, "
                     "each through its own DelayedScaler; the fp32 weight is the parameter",
        "predict_speedup": "predict_speedup(profile, option='fused_adamw'|'bf16'|'batch2') -> float; the step's "
                           "tokens/s with the option over the baseline's, from the measured profile alone",
    }),
    "lab8": Seam("lab8", "lab8_multinode", "Multi-node: rendezvous, HSDP, elastic restart, async checkpoints", {
        "torchrun_args": "torchrun_args(nnodes, nproc_per_node, node_rank, endpoint, run_id, max_restarts, local_addr) "
                         "-> [torchrun options] for that node; c10d rendezvous at endpoint ('host:port')",
        "pick_interface": "pick_interface(master_addr) -> the interface name that reaches master_addr "
                          "(GLOO_SOCKET_IFNAME)",
        "check_layout": "check_layout(nodes, per_node) -> {world, nodes: [[ranks of node 0], ...]}; every rank; "
                        "raises if the job is not laid out node by node",
        "make_mesh": "make_mesh(nnodes, nproc_per_node, device_type) -> 2-D DeviceMesh ('replicate', 'shard'), "
                     "a node per row",
        "shard_model": "shard_model(model, mesh) -> model; fully_shard on the whole model (1-D: FSDP, 2-D: HSDP)",
        "save_checkpoint": "save_checkpoint(root, model, optimizer, step); every rank; DCP, committed atomically",
        "resume": "resume(root, model, optimizer) -> last complete checkpoint's step (0: none), loaded",
        "latest": "latest(root) -> the last complete checkpoint's folder, or None",
        "AsyncCheckpointer": "AsyncCheckpointer(); .save(root, state_dict, step) returns once staged, writes in the "
                             "background, commits atomically; .wait()",
        "blocking_save": "blocking_save(root, state_dict, step); every rank; returns once committed",
        "checkpoint_interval": "checkpoint_interval(save_s, mtbf_s) -> seconds of training between saves that "
                               "waste the least time (save_s: the stall training waits for)",
        "predict_goodput": "predict_goodput(step_s, save_s, restart_s, mtbf_s, interval_steps) -> expected useful "
                           "step time / wall time, first order in 1 / mtbf_s",
    }),
    "lab9": Seam("lab9", "lab9_long_context", "Long context: flash attention, ring, zig-zag, Ulysses", {
        "flash_attention": "flash_attention(q, k, v, causal=False, block_q=32, block_k=32) -> o; (b, h, s, d), any s; "
                           "equals softmax(q k^T/sqrt(d)) v and its gradients; keeps O(s*d) bytes for backward",
        "merge": "merge(o1, lse1, o2, lse2) -> (o, lse); o (b, h, s, d), lse (b, h, s): attention over the union of "
                 "two disjoint key sets from each set's; a side with lse -inf (no key seen) leaves the other as it is",
        "ring_attention": "ring_attention(q, k, v, causal=True, layout='contiguous'|'zigzag', group=None, block=32) "
                          "-> this rank's output rows; q, k, v this rank's rows (b, h, s/N, d); K/V pass round the "
                          "ring by send/recv; differentiable",
        "zigzag_shard": "zigzag_shard(x, rank, world, dim=2) -> chunks rank and 2*world-1-rank of 2*world along dim",
        "ulysses_attention": "ulysses_attention(q, k, v, causal=True, group=None) -> this rank's output rows; "
                             "all-to-all to heads and back; ValueError when the ranks do not divide the heads",
        "apply_context_parallel": "apply_context_parallel(model, cp_group, seq_len, layout='zigzag') -> model; in "
                                  "place, from outside: attention as the ring over cp_group, global positions",
        "cp_dp_step": "cp_dp_step(model, optimizer, (x, y) this rank's tokens, group=None) -> the global mean loss; "
                      ".grad and the update equal one process's step on the global batch",
        "save_cp_checkpoint": "save_cp_checkpoint(path, model, optimizer, scheduler, sampler, step, group=None); every "
                              "rank; on return path holds the whole state, and a kill during it leaves the previous "
                              "checkpoint whole (written through torch.save or DCP)",
        "load_cp_checkpoint": "load_cp_checkpoint(path, model, optimizer, scheduler, sampler, group=None) -> step; "
                              "every rank; the next cp_dp_step bit-identical to the uninterrupted run's",
    }),
    "lab10": Seam("lab10", "lab10_moe", "Mixture of experts: routing, capacity, balance, expert parallelism", {
        "route": "route(scores (T, E), k, bias=None) -> (ids (T, k) int64, weights (T, k) float32); top-k of "
                 "softmax(scores) + bias, best first, ties to the lower index; weights the probabilities renormalised",
        "load_balancing_loss": "load_balancing_loss(probs (T, E), ids (T, k), E) -> E * sum_e f_e P_e; f a count, "
                               "P = probs.mean(0) carries the gradient",
        "capacity": "capacity(T, k, E, factor) -> ceil(factor * T * k / E)",
        "keep_mask": "keep_mask(ids (T, k), E, cap) -> bool (T, k); slots to every first choice in token order, then "
                     "every second choice, ...",
        "MoE": "MoE(hidden, n_experts, k=2, ffn=None, capacity_factor=1.25): router.weight (E, h), w1 (E, h, f), "
               "w2 (E, f, h), buffer bias (E,); forward (..., h) -> (..., h); .aux_loss and .counts of the last call",
        "apply_moe": "apply_moe(model, n_experts, k=2, capacity_factor=1.25) -> model; every block's mlp an MoE",
        "expert_parallel": "expert_parallel(moe, group=None) -> the layer with this rank's E/N experts (w1, w2 "
                           "sliced), tokens dispatched by all-to-all; equals moe on this rank's tokens",
        "apply_expert_parallel": "apply_expert_parallel(model, group=None) -> model; every MoE block made EP",
        "update_bias": "update_bias(bias, counts, gamma) -> None; in place, bias_e += gamma * sign(mean - counts_e)",
        "ep_dp_step": "ep_dp_step(model, optimizer, (x, y), dp_group, aux_coef, gamma) -> mean loss over all ranks; "
                      ".grad the global mean's gradient (experts reduced over dp only), bias updated from all ranks",
        "save_checkpoint": "save_checkpoint(root, model, optimizer, step); every rank, its own state under root",
        "load_checkpoint": "load_checkpoint(root, model, optimizer) -> step; every rank, same layout; the next step "
                           "equals the uninterrupted run's",
        "count_params": "count_params(model) -> (dense, expert); a one-process model with MoE blocks, tied weights "
                        "once",
        "plan_experts": "plan_experts(dense, expert, n_experts, world, budget_bytes, bytes_per_param=16) -> {ep, dp, "
                        "experts_per_rank, bytes, fits, bytes_by_ep}: the smallest ep dividing E and W that fits",
    }),
}


def lab_names() -> list[str]:
    """lab1, lab2, ..., lab10: in the course's order, not the strings' (lab10 after lab9)."""
    return sorted(SEAMS, key=lambda lab: int(lab[3:]))


def normalise(lab: str) -> str | None:
    """'lab1', '1' and 'lab1_baseline' all mean lab1; None for an unknown lab."""
    key = lab if lab.startswith("lab") else f"lab{lab}"
    key = key.split("_")[0]
    return key if key in SEAMS else None


def module_name(lab: str, target: str) -> str:
    return f"{target}.{SEAMS[lab].folder}"


class ReferenceImportError(ImportError):
    """Learner code that imports the reference (solutions.*) or hands the checker objects it did not define."""


_REFERENCE_IMPORTS: list[str] = []  # every import of solutions.* by learner code in this process, as a message


def _is_reference(name: str) -> bool:
    return name == "solutions" or name.startswith("solutions.")


def _guard_imports() -> None:
    """From now on, an `import solutions...` or `import checker...` executed by a module of labs.* (not the shared
    core) raises.

    `import` and `from ... import` call builtins.__import__ with the importer's globals, even when the
    module is already loaded (the checker loads the reference for its own comparisons), so the importer is
    known exactly; the checker's own imports of the reference come from checker.* and pass."""
    import builtins

    original = builtins.__import__
    if getattr(original, "_checker_guard", False):
        return

    def guarded(name, globals=None, locals=None, fromlist=(), level=0):
        importer = (globals or {}).get("__name__") or ""
        grader = name == "checker" or name.startswith("checker.")  # its own references (checker/labs/*_ref.py)
        if level == 0 and (_is_reference(name) or grader) and importer.startswith("labs.") and not is_shared(importer):
            path = importer.replace(".", "/") + ("/__init__.py" if "__path__" in globals else ".py")
            msg = (f"your {path} imports {'the grader' if grader else 'the reference'} {name}: graded code must be "
                   f"your own (write the TODOs in labs/; the checker compares you against references of its own)")
            _REFERENCE_IMPORTS.append(msg)
            raise ReferenceImportError(msg)
        return original(name, globals, locals, fromlist, level)

    guarded._checker_guard = True
    builtins.__import__ = guarded


def _defined_in(obj, package: str, folder) -> bool:
    """Is the seam object `obj` the package's own: defined in a module of `package`, from a file in `folder`?"""
    import functools
    import inspect
    from pathlib import Path

    while isinstance(obj, functools.partial):
        obj = obj.func
    module = getattr(obj, "__module__", None) or ""
    if not (module == package or module.startswith(package + ".")):
        return False
    try:
        source = inspect.getsourcefile(obj) or ""
    except TypeError:  # an instance or a builtin: its module name is all there is
        return True
    return Path(source).resolve().is_relative_to(Path(folder).resolve())


def check_own_code(lab: str) -> None:
    """Raise if learner code imported the reference at any point of this process (called by the worker
    after each task on the learner's code, so an import caught and swallowed by the learner still fails)."""
    if _REFERENCE_IMPORTS:
        raise ReferenceImportError(_REFERENCE_IMPORTS[0])


def wrap(package, name: str, wrapper) -> None:
    """Replace the seam function `name` by wrapper(fn) wherever a module of `package` holds it (the module that
    defines it and any that imported it by name), so code calling it through any of them (module.name(...))
    runs the wrapper: how the checker times a learner's function in place."""
    import sys

    fn = getattr(package, name)
    wrapped = wrapper(fn)
    for mod_name, mod in list(sys.modules.items()):
        if mod is not None and (mod_name == package.__name__ or mod_name.startswith(package.__name__ + ".")):
            for attr, value in list(vars(mod).items()):
                if value is fn:
                    setattr(mod, attr, wrapped)


def load(lab: str, target: str):
    """Import the learner's (or the reference) lab package and check the seam is complete and its own.

    For the learner's code (target "labs") the reference is out of bounds: an import of solutions.* raises
    (see _guard_imports), and every seam object must be defined in a module of labs/<folder>, from a file
    there, not re-exported from elsewhere."""
    import sys

    name = module_name(lab, target)
    fresh = target == "labs" and name not in sys.modules
    hidden = {}
    if target == "labs":
        _guard_imports()
    if fresh:  # hide a reference loaded already, so that an import of it by other means (importlib) shows too
        hidden = {k: sys.modules.pop(k) for k in list(sys.modules) if _is_reference(k)}
    try:
        mod = importlib.import_module(name)
    finally:
        appeared = sorted(k for k in sys.modules if _is_reference(k)) if fresh else []
        sys.modules.update(hidden)
    if appeared and not _REFERENCE_IMPORTS:
        _REFERENCE_IMPORTS.append(f"your labs/{SEAMS[lab].folder} imports the reference {appeared[-1]}: "
                                  "graded code must be your own")
    if target == "labs":
        check_own_code(lab)
    missing = [n for n in SEAMS[lab].functions if "." not in n and not hasattr(mod, n)]  # "x.sbatch": a file
    if missing:
        raise ImportError(f"{target}/{SEAMS[lab].folder}/__init__.py does not export {', '.join(missing)} "
                          f"(the checker calls these; see the lab README's 'What the checker calls')")
    folder = os.path.dirname(mod.__file__)
    foreign = [f"{n} (from {getattr(getattr(mod, n), '__module__', '?')})" for n in SEAMS[lab].functions
               if "." not in n and not _defined_in(getattr(mod, n), name, folder)]
    if foreign:
        raise ReferenceImportError(f"{target}/{SEAMS[lab].folder}/__init__.py exports {', '.join(foreign)}, not "
                                   f"defined in {target}/{SEAMS[lab].folder}: the checker grades code written there")
    return mod


def notebook_target() -> str:
    """The switch notebooks honour: COURSE_TARGET=solutions runs them against the reference."""
    target = os.environ.get("COURSE_TARGET", "labs")
    if target not in ("labs", "solutions"):
        raise ValueError(f"COURSE_TARGET must be 'labs' or 'solutions', not {target!r}")
    return target
