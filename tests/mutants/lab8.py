"""Lab 8's mutants: one realistic slip each, and the check that must catch it."""
from . import Mutant

LOAD = ('    state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}\n'
        "    dcp.load(state, checkpoint_id=str(folder))\n"
        '    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])\n')

_L, _H, _E, _A = "launch.py", "hsdp.py", "elastic.py", "async_ckpt.py"
RET = ('    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}", f"--node-rank={node_rank}",\n'
       '            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",\n'
       '            f"--rdzv-conf={conf}", f"--local-addr={local_addr}", f"--max-restarts={max_restarts}"]\n')
MESH = '    return init_device_mesh(device_type, (nnodes, nproc_per_node), mesh_dim_names=("replicate", "shard"))\n'
CONF = ('    conf = "keep_alive_interval=1,keep_alive_max_attempt=3" + (",is_host=1" if node_rank == 0 else '
        '",is_host=0")\n')

MUTANTS = [
    Mutant("interval_without_save_cost", "goodput.py", "    return math.sqrt(2 * save_s * mtbf_s)\n",
           "    return mtbf_s / 10  # a tenth of the MTBF, whatever the save costs\n",
           "goodput_formulas", "the interval is a fixed share of the MTBF: the save's cost never enters the balance, "
           "so a cheap save checkpoints too rarely and a dear one too often"),
    Mutant("hsdp_mesh_transposed", "hsdp.py",
           '    return init_device_mesh(device_type, (nnodes, nproc_per_node), '
           'mesh_dim_names=("replicate", "shard"))\n',
           "    import torch\n    from torch.distributed.device_mesh import DeviceMesh\n"
           "    ranks = torch.arange(nnodes * nproc_per_node).view(nnodes, nproc_per_node).t()\n"
           '    return DeviceMesh(device_type, ranks, mesh_dim_names=("replicate", "shard"))\n',
           "hsdp_internode_bytes", "a row of the mesh is a local rank across nodes: every shard group spans the "
           "slow link"),
    Mutant("staging_not_awaited", "async_ckpt.py", "        staged = stage(state_dict)\n",
           "        staged = state_dict  # written later, from the live tensors\n",
           "async_checkpoint", "save() returns before the state is copied: the background write reads weights "
           "the next optimizer steps have changed"),
    Mutant("save_waits_for_its_write", "async_ckpt.py",
           "        self.pending = self.pool.submit(_write, Path(root), step, staged, self.group)\n",
           "        self.pending = self.pool.submit(_write, Path(root), step, staged, self.group)\n"
           "        self.wait()  # returns once the write is done\n",
           "async_checkpoint", "save() waits for its own write: an async save that stalls training as long as a "
           "blocking one"),
    Mutant("restart_reinitialises", "elastic.py", "    folder = latest(root)\n", "    folder = None\n",
           "elastic_recovery", "resume() never finds the checkpoint: the restarted workers start over from step 1 "
           "with fresh weights"),
    Mutant("optimizer_not_restored", "elastic.py", LOAD,
           LOAD.replace(' "optim": optim_sd,', "").replace('state["optim"]', "optim_sd"),
           "elastic_recovery", "the checkpoint is loaded without the optimizer: the weights come back but AdamW's "
           "moments start over, and the losses after the restart drift from the uninterrupted run's"),
    Mutant("chaos_interval_without_save_cost", "goodput.py", "    return math.sqrt(2 * save_s * mtbf_s)\n",
           "    return math.sqrt(mtbf_s)  # grows with the MTBF, as it should, but knows nothing of the save\n",
           "goodput_chaos", "an interval that grows with the MTBF but ignores the measured save cost: the chaos run "
           "saves at another interval than Young-Daly's for the save it timed"),
    Mutant("goodput_forgets_restart", "goodput.py", "    per_failure = restart_s + period / 2",
           "    per_failure = period / 2", "goodput_formulas",
           "a failure costs only the work since the last checkpoint: the restart (a node found, processes started, the "
           "checkpoint loaded) is left out, and the goodput predicted is too high"),
    Mutant("chaos_goodput_ignores_failures", "goodput.py",
           "    return tau / period * max(0.0, 1 - per_failure / mtbf_s)\n",
           "    return tau / period  # the save stalls: the only cost paid every period\n", "goodput_chaos",
           "the prediction counts only the save stalls: the chaos run, losing a fifth of an MTBF per failure, trains "
           "0.3 less than predicted"),
    Mutant("resume_newest_folder", "elastic.py", "    folder = latest(root)\n",
           '    folders = sorted(Path(root).glob("step_*"), key=lambda p: p.stat().st_mtime)\n'
           "    folder = folders[-1] if folders else None  # the newest folder on disk, committed or not\n",
           "goodput_chaos", "resume loads the newest checkpoint folder on disk: after a kill inside a save that is the "
           "half-written one, which no load can read"),
    # blind: a learner who worked lab 8 from its README, starters and the checker's output only (never checker/)
    # broke their own solution 20 ways; 10 passed every check they were graded on (SURVIVORS.md). The 10 that fail:
    Mutant("no_local_addr", _L, RET, RET.replace(', f"--local-addr={local_addr}"', ""), "multinode_launch",
           "no --local-addr: node 0's agent advertises its hostname, which node 1 cannot reach", blind=True),
    Mutant("no_max_restarts", _L, RET, RET.replace(', f"--max-restarts={max_restarts}"', ""), "elastic_recovery",
           "--max-restarts left out: torchrun's default 0 gives up at the first failed worker", blind=True),
    Mutant("static_rendezvous", _L, RET,
           '    host, port = endpoint.rsplit(":", 1)\n'
           '    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}", f"--node-rank={node_rank}",\n'
           '            f"--master-addr={host}", f"--master-port={port}", f"--max-restarts={max_restarts}"]\n',
           "elastic_recovery", "the classic static launch (--master-addr/--master-port/--node-rank): no c10d "
           "rendezvous for the restarted node to rejoin", blind=True),
    Mutant("interface_from_route_only", _L, '    held = ip("addr", "show", "to", master_addr)  #', "    held = []  #",
           "multinode_launch", "the interface is always the route's: on node 0 its own address routes via lo, so "
           "gloo listens where node 1 cannot reach it", blind=True),
    Mutant("layout_by_local_rank", _L, '        nodes.setdefault(r["group_rank"], []).append(r["rank"])\n',
           '        nodes.setdefault(r["local_rank"], []).append(r["rank"])\n', "multinode_launch",
           "ranks grouped into nodes by LOCAL_RANK: node 0 becomes local rank 0 of every node", blind=True),
    Mutant("mesh_flat", _H, MESH, "    return init_device_mesh(device_type, (nnodes * nproc_per_node,))\n",
           "hsdp_internode_bytes", "a 1-D mesh over every rank: HSDP is plain FSDP, shard groups across the link",
           blind=True),
    Mutant("shard_on_shard_submesh", _H, "    fully_shard(model, mesh=mesh, reshard_after_forward=False)\n",
           '    fully_shard(model, mesh=mesh["shard"] if mesh.ndim == 2 else mesh, reshard_after_forward=False)\n',
           "hsdp_equivalence", "HSDP given only the shard sub-mesh: each node trains its own replica, gradients "
           "never averaged across nodes", blind=True),
    Mutant("resume_step_plus_one", _E, '    return int(state["step"])\n', '    return int(state["step"]) + 1\n',
           "elastic_recovery", "resume returns the step after the checkpoint's: the caller adds one again, a step "
           "is skipped", blind=True),
    Mutant("resume_returns_zero", _E, '    return int(state["step"])\n', "    return 0\n", "elastic_recovery",
           "resume loads the checkpoint but returns 0: the restarted job reruns steps 1.. from the loaded weights",
           blind=True),
    Mutant("to_cpu_is_not_a_copy", _A, "        staged = stage(state_dict)\n",
           '        staged = tree_map(lambda t: t.detach().to("cpu") if isinstance(t, torch.Tensor) else t, '
           "state_dict)\n", "async_checkpoint",
           ".to('cpu') as the snapshot: on CPU tensors it returns the live tensor itself, no copy", blind=True),
    # caught since: the blind survivors of SURVIVORS.md's lab 8 section that later checks kill
    Mutant("default_keep_alive", _L, CONF, '    conf = "is_host=1" if node_rank == 0 else "is_host=0"\n',
           "multinode_launch", "no keep-alive settings: a silent node is declared dead after torchrun's default "
           "15 s, not 3 s", blind=True),
    Mutant("every_node_hosts_store", _L, CONF,
           '    conf = "keep_alive_interval=1,keep_alive_max_attempt=3,is_host=1"\n', "multinode_launch",
           "is_host=1 on every node: each agent binds the rendezvous port, and a node where it is taken fails",
           blind=True),
    Mutant("nnodes_nproc_swapped", _L, RET,
           RET.replace('f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}"',
                       'f"--nnodes={nproc_per_node}", f"--nproc-per-node={nnodes}"'), "multinode_launch",
           "--nnodes and --nproc-per-node swapped (the same job only when nodes = ranks per node)", blind=True),
    Mutant("layout_numbering_unchecked", _L,
           '        if r["rank"] != r["group_rank"] * r["local_world"] + r["local_rank"]:\n',
           '        if r["rank"] < 0:\n', "multinode_launch",
           "check_layout never checks RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK: a job numbered against "
           "the nodes passes it", blind=True),
    Mutant("mesh_shape_swapped", _H, MESH, MESH.replace("(nnodes, nproc_per_node)", "(nproc_per_node, nnodes)"),
           "hsdp_equivalence", "mesh shape (ranks per node, nodes): a row is no longer a node once they differ",
           blind=True),
    Mutant("mesh_names_swapped", _H, MESH, MESH.replace('("replicate", "shard")', '("shard", "replicate")'),
           "hsdp_equivalence", "the mesh's dims named the wrong way round (shape right, names swapped)", blind=True),
    Mutant("resume_highest_step_folder", _E, "    folder = latest(root)\n",
           '    folder = max(Path(root).glob("step_*"), default=None, key=lambda p: int(p.name[5:].split(".")[0]))\n',
           "goodput_chaos", "resume takes the highest step_* folder on disk, a .partial one included, not what "
           "`latest` points at", blind=True),
    Mutant("writer_on_default_group", _A,
           "        self.pending = self.pool.submit(_write, Path(root), step, staged, self.group)\n",
           "        self.pending = self.pool.submit(_write, Path(root), step, staged, None)\n", "async_checkpoint",
           "the background write's collectives on the default group, interleaving with training's", blind=True),
    Mutant("staging_in_the_thread", _A,
           "        staged = stage(state_dict)\n"
           "        self.pending = self.pool.submit(_write, Path(root), step, staged, self.group)\n",
           "        self.pending = self.pool.submit(lambda: _write(Path(root), step, stage(state_dict), self.group))\n",
           "async_checkpoint", "the copy to CPU done in the background thread too: save returns before the snapshot "
           "exists", blind=True),
]

# Written blind (issue #33) from labs/lab8_multinode/README.md's Goodput part and the starters goodput.py and
# elastic.py only, never checker/: slips in the Young-Daly arithmetic and in the checkpoint the chaos run resumes.
MUTANTS += [
    Mutant("goodput_interval_no_two", "goodput.py", "    return math.sqrt(2 * save_s * mtbf_s)\n",
           "    return math.sqrt(save_s * mtbf_s)\n", "goodput_formulas",
           "interval sqrt(C MTBF): a failure taken to lose a whole interval, not half of one on average", blind=True),
    Mutant("goodput_whole_period_lost", "goodput.py",
           "    per_failure = restart_s + period / 2  # the restart, and on average half a period of work redone",
           "    per_failure = restart_s + period  # the restart, and the period's work redone",
           "goodput_formulas", "a failure loses the whole period, not half of one on average", blind=True),
    Mutant("goodput_save_useful", "goodput.py",
           "    return tau / period * max(0.0, 1 - per_failure / mtbf_s)",
           "    return max(0.0, 1 - per_failure / mtbf_s)",
           "goodput_formulas", "counts the save stall as useful time: only failures waste", blind=True),
    Mutant("goodput_steps_as_seconds", "goodput.py",
           "    tau = interval_steps * step_s\n    period",
           "    tau = interval_steps\n    period",
           "goodput_formulas", "takes interval_steps for seconds of training", blind=True),
    Mutant("chaos_pointer_first", "elastic.py",
           '    final, partial = root / f"step_{step}", root / f"step_{step}.partial"\n'
           "    model_sd, optim_sd = get_state_dict(model, optimizer)\n"
           '    dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)}, '
           'checkpoint_id=str(partial))\n'
           "    if dist.get_rank() == 0:\n"
           "        _commit(root, partial, final)\n",
           '    final = root / f"step_{step}"\n'
           "    model_sd, optim_sd = get_state_dict(model, optimizer)\n"
           "    if dist.get_rank() == 0:\n"
           "        root.mkdir(parents=True, exist_ok=True)\n"
           '        (root / "latest").write_text(final.name)\n'
           '    dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)}, '
           'checkpoint_id=str(final))\n',
           "goodput_chaos", "a save that is not atomic: `latest` names the folder before it is written in place, so a "
           "kill mid-save leaves `latest` naming a torn checkpoint", blind=True),
    Mutant("chaos_resume_next_step", "elastic.py", '    return int(state["step"])\n',
           '    return int(state["step"]) + 1  # the next step to run\n', "goodput_chaos",
           "resume returns the step to run next, not the checkpoint's: the restarted job skips a step", blind=True),
    Mutant("chaos_resume_model_only", "elastic.py",
           '    state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}\n'
           "    dcp.load(state, checkpoint_id=str(folder))\n"
           '    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])\n',
           '    state = {"model": model_sd, "step": torch.tensor(0)}\n'
           "    dcp.load(state, checkpoint_id=str(folder))\n"
           '    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=optim_sd)\n',
           "goodput_chaos", "resume restores the weights but not AdamW's moments and step counts (the edit of "
           "optimizer_not_restored, graded here by the chaos run)", blind=True),
    Mutant("chaos_steps_as_seconds", "goodput.py",
           "    tau = interval_steps * step_s\n    period",
           "    tau = interval_steps\n    period",
           "goodput_chaos", "predict_goodput takes interval_steps for seconds of training", blind=True),
]
