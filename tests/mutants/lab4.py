"""Lab 4's mutants: a plausible but wrong fix per incident, and wrong diagnoses; each with the check that fails it.

A fix tuned to the public conditions (variant 0) passes there and fails under a hidden variant: those mutants
are graded with `--variant 1`, as a class's hand-ins are.
"""
from . import Mutant

_V1 = ("--variant", "1")  # incident 1: 3 ranks, SLURM_NTASKS=5; 3: eval_every 3; 6: COURSE_IFNAME=eth9
_V2 = ("--variant", "2")  # incident 1: SLURM_NTASKS=6, SLURM_PROCID=0 on every rank; incident 2: the bad loss is inf
_JOIN = "    return cdist.init(timeout_s=timeout_s)\n"
_SKIP = "    dist.all_reduce(flag)\n    return flag.item() > 0\n"
# find_desync's line that files each rank's collectives under their sequence numbers
_BY_SEQ = ('by_seq = {r: {e["collective_seq_id"]: e for e in d["entries"] if not e.get("is_p2p")} '
           'for r, d in dumps.items()}')
# the peer's first error in incident 2's faulty log (a consequence of the mismatch, not the mismatch)
_RESET = ("[rank0]: RuntimeError: Got the following error when running the callback: RuntimeError: "
          "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:37297: "
          "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. "
          "Check the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f")
_SAVE = """    ckpt.atomic_save(ckpt.rng_state(), _rng_path(path, rank, step))
    dist.barrier()
    if rank == 0:
        ckpt.atomic_save({"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)
    dist.barrier()
"""

MUTANTS = [
    Mutant("join_tuned_to_allocation", "incident1.py", "    return cdist.init(timeout_s=timeout_s)\n",
           "    import datetime, os\n"
           "    world = int(os.environ.get('SLURM_NTASKS', 4)) // 2  # the allocation holds two tasks per rank\n"
           "    local_rank = int(os.environ.get('LOCAL_RANK', 0))\n"
           "    device, backend = cdist.pick_device(os.environ.get('COURSE_DEVICE', 'auto'), local_rank)\n"
           "    dist.init_process_group(backend, world_size=world, rank=int(os.environ['RANK']),\n"
           "                            timeout=datetime.timedelta(seconds=timeout_s))\n"
           "    return cdist.DistEnv(int(os.environ['RANK']), world, local_rank, device, backend)\n",
           "fixed_incident1", "world size derived from SLURM_NTASKS by a factor that fits 4 tasks only", _V2),
    Mutant("skip_decided_per_rank", "incident2.py", "    flag = torch.tensor([0.0 if math.isfinite(loss) else 1.0], "
           "device=device)\n    dist.all_reduce(flag)\n    return flag.item() > 0\n",
           "    return not math.isfinite(loss)  # no collective in the branch: nothing to hang\n",
           "fixed_incident2",
           "skip_step decides on its own rank's loss: the hang is gone, the other rank steps on NaN"),
    Mutant("skip_flag_not_summed", "incident2.py", "    dist.all_reduce(flag)\n    return flag.item() > 0\n",
           "    dist.all_reduce(flag)\n    return not math.isfinite(loss)\n",
           "fixed_incident2", "every rank joins the all-reduce, then ignores its result and decides locally"),
    Mutant("validate_every_step_everywhere", "incident3.py", "    if step % job.eval_every:\n        return None\n",
           "", "fixed_incident3", "validation on every rank every step: no straggler, but every step pays 8 forwards"),
    Mutant("shards_drop_too_many", "incident4.py", "    return list(range(rank, n - n % world, world))\n",
           "    return list(range(rank, n - world, world))\n", "fixed_incident4",
           "equal shards by dropping a whole world's worth of samples every epoch, not only the remainder"),
    Mutant("shards_pad_too_many", "incident4.py", "    return list(range(rank, n - n % world, world))\n",
           "    return [i % n for i in range(rank, n + world, world)]\n", "fixed_incident4",
           "pads every shard by one, even when n divides evenly: samples repeated every epoch"),
    Mutant("load_forgets_optimizer", "incident5.py", "    optimizer.load_state_dict(state[\"optimizer\"])\n", "",
           "fixed_incident5", "the optimizer state is saved but not loaded: AdamW restarts from zero moments"),
    Mutant("load_forgets_rng", "incident5.py",
           "    ckpt.set_rng_state(ckpt.load(_rng_path(path, dist.get_rank(), state[\"step\"])))\n",
           "", "fixed_incident5", "the RNG state is saved but not restored: the dropout masks after resume differ"),
    Mutant("main_file_written_in_place", "incident5.py",
           "        ckpt.atomic_save({\"model\": ddp.module.state_dict(), \"optimizer\"",
           "        torch.save({\"model\": ddp.module.state_dict(), \"optimizer\"", "fixed_incident5",
           "rank 0 writes the main file in place: a kill mid-write leaves a truncated file and no checkpoint"),
    Mutant("rng_file_not_per_step", "incident5.py", 'return Path(f"{path}.rng-rank{rank}-step{step}")',
           'return Path(f"{path}.rng-rank{rank}")', "fixed_incident5",
           "one RNG file per rank, overwritten by each save: a kill while the main file is written leaves the "
           "previous step's weights with the next step's RNG streams"),
    Mutant("interface_tuned_to_ib0", "incident6.py",
           "    ifname = wanted if wanted in have else route_interface(master_addr)\n",
           "    ifname = \"lo\" if wanted == \"ib0\" else wanted  # ib0 is the InfiniBand name; here it's loopback\n",
           "fixed_incident6", "maps the one missing name seen in the log to lo; any other missing name still fails",
           _V1),
    Mutant("launch_other_fixed_port", "incident7.py", "    return [\"--standalone\", f\"--nproc-per-node={nproc}\"]\n",
           "    return [\"--nnodes=1\", f\"--nproc-per-node={nproc}\", \"--master-addr=127.0.0.1\", "
           "\"--master-port=29501\"]\n", "fixed_incident7",
           "moves the rendezvous to another fixed port: the other job is gone, but two of ours still clash"),
    Mutant("no_sync_wrong_micro_batch", "incident8.py", "with ddp.no_sync() if i < k - 1 else nullcontext():",
           "with ddp.no_sync() if i > 0 else nullcontext():", "fixed_incident8",
           "communicates on the first micro-batch, not the last: the others' gradients never leave the rank"),
    Mutant("no_sync_never", "incident8.py", "with ddp.no_sync() if i < k - 1 else nullcontext():",
           "with nullcontext():", "fixed_incident8", "still one all-reduce per micro-batch: 4x the traffic"),
    # diagnosis.toml
    Mutant("hang_called_deadlock", "diagnosis.toml", 'cause = "uneven_shards"', 'cause = "dataloader_deadlock"',
           "diagnosed_incident4", "the epoch-end hang blamed on the data loader, not the uneven shards"),
    Mutant("slow_called_straggler", "diagnosis.toml", 'cause = "slow_link"', 'cause = "straggler"',
           "diagnosed_incident8", "the slow job blamed on a straggler, not the link"),
    Mutant("evidence_made_up", "diagnosis.toml", 'evidence = "name: EADDRINUSE, message: address already in use"',
           'evidence = "EADDRINUSE: port 29500 is held by another job"', "diagnosed_incident7",
           "an evidence line that sounds right but is not in the log"),
    Mutant("evidence_irrelevant", "diagnosis.toml",
           'evidence = "Unable to find address for: ib0"',
           'evidence = "[rank=0] launch environment: RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=localhost '
           'MASTER_PORT=29500 COURSE_IFNAME=ib0"', "diagnosed_incident6",
           "a line that occurs in the log and names ib0, but does not show that ib0 is missing here"),
    # forensics.py: analysers that read the dumps the way a hurried on-call engineer does
    Mutant("desync_first_to_time_out", "forensics.py",
           '            return {"rank": min(lacking), "seq": seq, "kind": "missing"}\n',
           '            waited = [r for r in by_seq if seq in by_seq[r]]  # these ranks hung in collective seq\n'
           '            first = min(waited, key=lambda r: by_seq[r][seq]["time_created_ns"])  # timed out first\n'
           '            return {"rank": first, "seq": seq, "kind": "missing"}\n',
           "desync_found", "blames the rank that entered the hung collective first (the first to time out), not the "
           "one that never reached it"),
    Mutant("desync_last_entries_only", "forensics.py",
           '    for seq in sorted(s for s in set().union(*map(set, by_seq.values())) if s >= start):\n',
           "    for seq in [min(max(s) for s in by_seq.values())]:  # where the job stopped\n",
           "desync_found", "compares only where each rank stopped: a silent mismatch the job ran past is missed"),
    Mutant("desync_sizes_first", "forensics.py",
           '(("op", "profiling_name"), ("size", "input_sizes"), ("dtype", "input_dtypes"))',
           '(("size", "input_sizes"), ("op", "profiling_name"), ("dtype", "input_dtypes"))',
           "desync_found", "compares shapes before the collective's type: a different collective is called a size "
           "mismatch"),
    Mutant("desync_differs_from_rank0", "forensics.py",
           "                odd = min(values, key=lambda r: (held[values[r]], r))  # the value no other rank shares\n",
           "                odd = min(r for r in values if values[r] != values[0])  # the first rank unlike rank 0\n",
           "desync_found", "blames the first rank that differs from rank 0: wrong whenever rank 0 is the one that "
           "diverged"),
    Mutant("slow_rank_in_gbit", "forensics.py",
           "if slow in pair for x in v]) / 1e9\n",
           "if slow in pair for x in v]) * 8 / 1e9  # link rates are quoted in Gbit/s\n",
           "slow_rank_found", "reports the link in Gbit/s where GB/s is asked: 8x the rate"),
    Mutant("slow_rank_mean_of_every_pair", "forensics.py",
           "    gbps = statistics.median([x for pair, v in per_pair.items() if slow in pair for x in v]) / 1e9\n",
           "    gbps = statistics.mean(rate.values()) / 1e9  # the job's average link\n",
           "slow_rank_found", "estimates the slow link from every pair, the fast ones included"),
    Mutant("slow_rank_first_of_slowest_pair", "forensics.py",
           "    slow = min(ranks, key=lambda r: best[r])\n",
           "    slow = min(min(rate, key=rate.get))  # a rank of the slowest pair\n",
           "slow_rank_found", "blames the lower rank of the slowest pair: half the time its healthy partner"),
    Mutant("leak_largest_allocation", "forensics.py",
           "    line = max(growing, key=lambda k: sum(growing[k]))\n",
           "    line = max((a for a in allocs if a[0] is not None), key=lambda a: a[1])[0]  # the biggest tensor's\n"
           "    growing[line] = passes[line]\n",
           "memory_leak_found", "names the line of the largest allocation (the training forward's), not the line "
           "whose allocations pile up"),
    Mutant("leak_first_frame", "forensics.py",
           '        return next((f["line"] for f in frames if f["filename"] == source), None)\n',
           '        return frames[0]["line"] if frames else None  # the allocating call\n',
           "memory_leak_found", "attributes each allocation to the innermost frame (torch's or the model's), not to "
           "the script's line that called it"),
    Mutant("leak_total_bytes", "forensics.py",
           '"bytes_per_step": int(statistics.median(growing[line]))}',
           '"bytes_per_step": int(sum(growing[line]))}',
           "memory_leak_found", "reports every byte the line left alive, over all steps, as the bytes per step"),
    Mutant("leak_one_tensor_per_step", "forensics.py",
           '"bytes_per_step": int(statistics.median(growing[line]))}',
           '"bytes_per_step": int(statistics.median(a[1] for a in allocs if a[0] == line and a[2]))}',
           "memory_leak_found", "the typical surviving tensor taken for a step's growth: a kept graph holds dozens"),
    Mutant("leak_flags_clean_run", "forensics.py",
           "if line is not None and len(p) >= 3 and sum(b > 0 for b in p) > len(p) / 2}",
           "if line is not None and any(p)}",
           "memory_leak_found", "any line that left bytes alive is a leak: the clean run's optimizer state is named"),
    # blind: written from the lab's README, starters, the checker's output and its logs of the faulty jobs only (never
    # checker/): each incident fixed and diagnosed, then broken the way a learner does. The ones every check passed are
    # listed for the grader's owner in the branch's SURVIVORS.md, not here.
    Mutant("skip_only_if_all_ranks", "incident2.py", _SKIP,
           "    dist.all_reduce(flag)\n    return flag.item() == dist.get_world_size()\n", "fixed_incident2",
           "skips only when every rank's loss is non-finite: one rank's NaN still reaches every rank's weights",
           blind=True),
    Mutant("skip_decided_by_rank0", "incident2.py", _SKIP,
           "    dist.broadcast(flag, src=0)\n    return flag.item() > 0\n", "fixed_incident2",
           "rank 0's verdict broadcast to all: a NaN on any other rank is never skipped", blind=True),
    Mutant("validate_on_dashboard_every_step", "incident3.py", "    if step % job.eval_every:\n        return None\n",
           "    if env.rank != job.dashboard_rank:\n        return None\n", "fixed_incident3",
           "validation moved to the dashboard's rank alone, still every step: that rank stays the straggler",
           blind=True),
    Mutant("shards_contiguous_ceil", "incident4.py", "    return list(range(rank, n - n % world, world))\n",
           "    per = -(-n // world)\n    return list(range(rank * per, min(n, (rank + 1) * per)))\n",
           "fixed_incident4", "contiguous blocks of ceil(n / world): the last rank's block is short, the hang stays",
           blind=True),
    Mutant("shards_remainder_minus_one", "incident4.py", "    return list(range(rank, n - n % world, world))\n",
           "    return list(range(rank, n - n % world - 1, world))\n", "fixed_incident4",
           "one sample too many dropped: the last rank's shard is one shorter", blind=True),
    Mutant("old_rng_deleted_first", "incident5.py", _SAVE,
           """    for old in Path(path).parent.glob(f"{Path(path).name}.rng-rank{rank}-step*"):
        if old != _rng_path(path, rank, step):
            old.unlink()
""" + _SAVE, "fixed_incident5", "older RNG files deleted before the new main file is in place: a kill inside its "
           "write leaves the previous main file without its RNG files", blind=True),
    Mutant("rng_saved_after_main", "incident5.py",
           '    ckpt.atomic_save(ckpt.rng_state(), _rng_path(path, rank, step))\n    dist.barrier()\n'
           '    if rank == 0:\n        ckpt.atomic_save({"model": ddp.module.state_dict(), '
           '"optimizer": optimizer.state_dict(), "step": step}, path)\n    dist.barrier()\n',
           '    dist.barrier()\n    if rank == 0:\n        ckpt.atomic_save({"model": ddp.module.state_dict(), '
           '"optimizer": optimizer.state_dict(), "step": step}, path)\n'
           '    ckpt.atomic_save(ckpt.rng_state(), _rng_path(path, rank, step))\n    dist.barrier()\n',
           "fixed_incident5", "the main file written before the ranks' RNG files: a kill between them leaves a main "
           "file naming a step whose RNG files do not exist", blind=True),
    Mutant("load_returns_next_step", "incident5.py", "    return state[\"step\"]\n",
           "    return state[\"step\"] + 1\n", "fixed_incident5",
           "load returns the step to run next, where the job expects the last completed one", blind=True),
    Mutant("rdzv_fixed_endpoint", "incident7.py", "    return [\"--standalone\", f\"--nproc-per-node={nproc}\"]\n",
           "    return [\"--nnodes=1\", f\"--nproc-per-node={nproc}\", \"--rdzv-backend=c10d\",\n"
           "            \"--rdzv-endpoint=127.0.0.1:29400\"]\n", "fixed_incident7",
           "c10d rendezvous on a fixed endpoint: two jobs meet in the same store", blind=True),
    Mutant("no_sync_always", "incident8.py", "with ddp.no_sync() if i < k - 1 else nullcontext():",
           "with ddp.no_sync():", "fixed_incident8",
           "every micro-batch under no_sync: no gradient ever leaves its rank", blind=True),
    Mutant("incident1_called_interface", "diagnosis.toml", 'cause = "world_size_mismatch"',
           'cause = "wrong_interface"', "diagnosed_incident1",
           "the silent start-up hang blamed on the network interface, not the world size", blind=True),
    Mutant("incident2_called_nan", "diagnosis.toml", 'cause = "collective_mismatch"', 'cause = "nan_loss"',
           "diagnosed_incident2", "blames the NaN that triggered the branch, not the collective only one rank calls",
           blind=True),
    Mutant("incident3_called_slow_link", "diagnosis.toml", 'cause = "straggler"', 'cause = "slow_link"',
           "diagnosed_incident3", "every rank reports slow steps: blamed on the link, not one busy rank", blind=True),
    Mutant("desync_list_index_as_seq", "forensics.py",
           "    by_seq = {r: {e[\"collective_seq_id\"]: e for e in d[\"entries\"] if not e.get(\"is_p2p\")}",
           "    by_seq = {r: {i: e for i, e in enumerate(d[\"entries\"]) if not e.get(\"is_p2p\")}",
           "desync_found", "an entry's position in the dump taken for its sequence number (0-based, and shifted "
           "once the ring buffer wraps)", blind=True),
    Mutant("slow_rank_counts_both_ways", "forensics.py",
           "            per_pair.setdefault(frozenset((src, dst)), []).append(nbytes / seconds)\n",
           "            per_pair.setdefault(frozenset((src, dst)), []).append(2 * nbytes / seconds)  # both ways\n",
           "slow_rank_found", "the bytes counted twice (the pair exchanges both ways): twice the rate", blind=True),
    Mutant("random_port", "incident7.py", "    return [\"--standalone\", f\"--nproc-per-node={nproc}\"]\n",
           "    import random\n    return [\"--nnodes=1\", f\"--nproc-per-node={nproc}\", "
           "\"--master-addr=127.0.0.1\",\n            f\"--master-port={random.randint(20000, 60000)}\"]\n",
           "fixed_incident7",
           "a port drawn at random: nothing stops another job holding it or drawing the same (the checker's two jobs "
           "met on one: EADDRINUSE)", blind=True),
    # blind, survived every check when written (tests/mutants/SURVIVORS.md), caught since by hidden variants and checks
    Mutant("join_world_hardcoded", "incident1.py", _JOIN,
           "    import datetime, os\n    world = 2  # the job is a 2-rank job; SLURM_NTASKS is the allocation's size\n"
           "    local_rank = int(os.environ.get('LOCAL_RANK', 0))\n"
           "    device, backend = cdist.pick_device(os.environ.get('COURSE_DEVICE', 'auto'), local_rank)\n"
           "    dist.init_process_group(backend, world_size=world, rank=int(os.environ['RANK']),\n"
           "                            timeout=datetime.timedelta(seconds=timeout_s))\n"
           "    return cdist.DistEnv(int(os.environ['RANK']), world, local_rank, device, backend)\n",
           "fixed_incident1", "the world size hard-coded to the 2 ranks of this job instead of read from the launcher",
           _V1, blind=True),
    Mutant("join_rank_from_slurm", "incident1.py", _JOIN,
           "    import datetime, os\n    world = int(os.environ['WORLD_SIZE'])\n"
           "    rank = int(os.environ.get('SLURM_PROCID', os.environ['RANK']))  # the Slurm task id is the rank\n"
           "    local_rank = int(os.environ.get('LOCAL_RANK', 0))\n"
           "    device, backend = cdist.pick_device(os.environ.get('COURSE_DEVICE', 'auto'), local_rank)\n"
           "    dist.init_process_group(backend, world_size=world, rank=rank,\n"
           "                            timeout=datetime.timedelta(seconds=timeout_s))\n"
           "    return cdist.DistEnv(rank, world, local_rank, device, backend)\n",
           "fixed_incident1", "the world size fixed, but the rank still taken from Slurm's task id", _V2, blind=True),
    Mutant("skip_nan_only", "incident2.py", "    flag = torch.tensor([0.0 if math.isfinite(loss) else 1.0]",
           "    flag = torch.tensor([1.0 if math.isnan(loss) else 0.0]", "fixed_incident2",
           "tests for NaN only: an infinite loss (an overflow) is not skipped", _V2, blind=True),
    Mutant("eval_every_hardcoded", "incident3.py", "    if step % job.eval_every:\n", "    if step % 4:\n",
           "fixed_incident3", "the validation interval hard-coded to the 4 seen in the log", _V1, blind=True),
    Mutant("eval_step_off_by_one", "incident3.py", "    if step % job.eval_every:\n",
           "    if (step + 1) % job.eval_every:\n", "fixed_incident3",
           "validates one step before each multiple of eval_every: as many evals, at the wrong steps", blind=True),
    Mutant("nccl_ifname_only", "incident6.py",
           'flush=True)\n    os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = ifname\n',
           'flush=True)\n    os.environ["NCCL_SOCKET_IFNAME"] = ifname\n', "fixed_incident6",
           "only NCCL's variable set: gloo picks its own interface, not the checked one", _V1, blind=True),
    Mutant("accum_sum_not_mean", "incident8.py", "            (loss / k).backward()\n", "            loss.backward()\n",
           "fixed_incident8", "the micro-batch losses summed, not averaged: the gradient is k times the mean",
           blind=True),
    Mutant("incident2_evidence_reset", "diagnosis.toml",
           'evidence = "Received data size doesn\'t match expected size. Is there a distributed collective mismatch in '
           'your code?"', f'evidence = "{_RESET}"', "diagnosed_incident2",
           "quotes the peer's 'connection reset', a consequence, not the mismatch gloo reports", blind=True),
    Mutant("incident3_evidence_step_time", "diagnosis.toml",
           'evidence = "rank times after step 12: inside train_step s r0=0.31 r1=0.17 | outside s r0=0.02 r1=0.20"',
           'evidence = "step 8 loss 5.2589 152 ms 2 all-reduces"', "diagnosed_incident3",
           "quotes one slow step's time: it shows the job is slow, not which rank is busy", blind=True),
    Mutant("incident4_evidence_rank_times", "diagnosis.toml",
           'evidence = "[rank=0] 25 samples this epoch -> 7 steps"',
           'evidence = "rank times after step 4: inside train_step s r0=0.36 r1=0.66 | outside s r0=0.45 r1=0.03"',
           "diagnosed_incident4", "quotes the rank-times line (incident 3's straggler, also in this log), not the "
           "shard sizes", blind=True),
    Mutant("incident5_evidence_loss", "diagnosis.toml",
           'evidence = "resumed from incident5.ckpt.pt at step 5: the optimizer holds state for 0 of 28 parameters"',
           'evidence = "[resumed] step 6 loss 5.3757 213 ms 1 all-reduces"', "diagnosed_incident5",
           "quotes the resumed loss: a symptom, not what the checkpoint lacked", blind=True),
    Mutant("incident8_evidence_all_reduce_count", "diagnosis.toml",
           'evidence = "link check: 1.0 MB all-reduce in 107.0 ms = 0.010 GB/s bus bandwidth (gloo, 2 ranks)"',
           'evidence = "step 2 loss 5.4760 368 ms 8 all-reduces"', "diagnosed_incident8",
           "quotes the all-reduce count, not the link measurement that shows the link is slow", blind=True),
]

# Written blind (issue #33) from labs/lab4_debugging/README.md's Forensics part and the starter forensics.py's TODO
# contracts only, never checker/: the slips a learner makes reading the flight recorder's dumps and the probe traces.
MUTANTS += [
    Mutant("desync_first_timeout", "forensics.py",
           '            return {"rank": min(lacking), "seq": seq, "kind": "missing"}',
           '            waiting = [r for r in by_seq if seq in by_seq[r]]\n'
           '            return {"rank": min(waiting, key=lambda r: by_seq[r][seq]["time_created_ns"]), "seq": seq,\n'
           '                    "kind": "missing"}',
           "desync_found", "a rank lacks collective S: names the rank that entered S first (the first to time out, a "
           "healthy peer that waited) instead of the rank that never issued it", blind=True),
    Mutant("desync_last_issued_seq", "forensics.py",
           '            return {"rank": min(lacking), "seq": seq, "kind": "missing"}',
           '            return {"rank": min(lacking), "seq": max(by_seq[min(lacking)]), "kind": "missing"}',
           "desync_found", "missing: reports the last collective the stuck rank did issue (where it was last seen), "
           "not the first one it never issued", blind=True),
    Mutant("desync_vs_rank0", "forensics.py",
           "                odd = min(values, key=lambda r: (held[values[r]], r))  # the value no other rank shares",
           "                odd = next(r for r in sorted(values) if values[r] != values[min(values)])  # != rank 0",
           "desync_found", "the diverging rank is the first whose record differs from rank 0's: when rank 0 is the "
           "odd one out, a healthy rank 1 is named", blind=True),
    Mutant("desync_shape_before_op", "forensics.py",
           '        for kind, key in (("op", "profiling_name"), ("size", "input_sizes"), ("dtype", "input_dtypes")):',
           '        for kind, key in (("size", "input_sizes"), ("op", "profiling_name"), ("dtype", "input_dtypes")):',
           "desync_found", "compares shapes before the collective's name: two different collectives on different "
           "shapes are reported as a size mismatch, not an op one", blind=True),
    Mutant("desync_fewest_entries", "forensics.py",
           "                odd = min(values, key=lambda r: (held[values[r]], r))  # the value no other rank shares",
           "                odd = min(by_seq, key=lambda r: (len(by_seq[r]), r))  # the one that got least far",
           "desync_found", "the diverging rank is the one with the fewest entries (it got least far): in a silent "
           "mismatch every rank has as many, and the lowest rank is named", blind=True),
    Mutant("slow_pair_lower_rank", "forensics.py",
           "    slow = min(ranks, key=lambda r: best[r])",
           "    slow = min(min(rate, key=rate.get))  # the slowest pair's first rank",
           "slow_rank_found", "names a rank of the slowest pair (its lower-numbered one) instead of the rank that is "
           "in every slow pair", blind=True),
    Mutant("slow_worst_pair", "forensics.py",
           "    best = {r: max(v for pair, v in rate.items() if r in pair) for r in ranks}",
           "    best = {r: min(v for pair, v in rate.items() if r in pair) for r in ranks}",
           "slow_rank_found", "ranks each rank by its worst pair: the slow rank and its partner in the slowest pair "
           "tie, and noise picks between them", blind=True),
    Mutant("slow_gbits", "forensics.py",
           "    gbps = statistics.median([x for pair, v in per_pair.items() if slow in pair for x in v]) / 1e9",
           "    gbps = statistics.median([x for pair, v in per_pair.items() if slow in pair for x in v]) * 8 / 1e9",
           "slow_rank_found", "reports gigabits per second (x8), not 10^9 bytes per second", blind=True),
    Mutant("slow_mean_all_pairs", "forensics.py",
           "    gbps = statistics.median([x for pair, v in per_pair.items() if slow in pair for x in v]) / 1e9",
           "    gbps = statistics.mean([x for v in per_pair.values() for x in v]) / 1e9",
           "slow_rank_found", "the rate is the mean over every transfer, the fast pair's included", blind=True),
    Mutant("slow_dedup_bytes_not_time", "forensics.py",
           "    gbps = statistics.median([x for pair, v in per_pair.items() if slow in pair for x in v]) / 1e9",
           "    spans = [t for p in paths for t in probe_spans(p) if slow in t[:2]]\n"
           "    gbps = sum(t[2] for t in spans) / 2 / sum(t[3] for t in spans) / 1e9  # each transfer is on both ends",
           "slow_rank_found", "counts each transfer's bytes once (both ends record it) but both ends' seconds: half "
           "the rate", blind=True),
    Mutant("slow_round_trip_bytes", "forensics.py",
           "            per_pair.setdefault(frozenset((src, dst)), []).append(nbytes / seconds)",
           "            per_pair.setdefault(frozenset((src, dst)), []).append(2 * nbytes / seconds)  # both ways",
           "slow_rank_found", "takes a span for the exchange both ways (2 x BYTES) when it is one transfer: twice the "
           "rate", blind=True),
    Mutant("desync_by_position", "forensics.py", _BY_SEQ,
           'by_seq = {r: {i + 1: e for i, e in enumerate(e for e in d["entries"] if not e.get("is_p2p"))}\n'
           '              for r, d in dumps.items()}',
           "desync_found", "lines the ranks' records up by position in the dump, not by collective_seq_id: once the "
           "ring wraps, position k names another collective on each rank", blind=True),
    Mutant("desync_with_p2p", "forensics.py", _BY_SEQ,
           'by_seq = {r: {e["collective_seq_id"]: e for e in d["entries"]} for r, d in dumps.items()}',
           "desync_found", "keeps point-to-point entries, which have no counterpart on every rank", blind=True),
    # the same forensics on a real tbf-shaped link (network namespaces: root only)
    Mutant("netns_slow_rank_in_gbit", "forensics.py", "if slow in pair for x in v]) / 1e9\n",
           "if slow in pair for x in v]) * 8 / 1e9  # link rates are quoted in Gbit/s\n",
           "slow_rank_found_netns", "reports the real link in Gbit/s where GB/s is asked: 8x the rate"),
]


def unavailable(m: Mutant) -> str | None:
    """Why this mutant cannot be graded here (None: it can): the real link needs root for its namespaces."""
    import os
    return "network namespaces need root" if m.check == "slow_rank_found_netns" and os.geteuid() != 0 else None
