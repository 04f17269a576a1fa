"""Lab 8's checks, each one declaration on the evaluator that decides it (checker/labs/__init__.py): from the
runs' measurements to pass/fail. Thresholds are stated once, here, each with its reason. An evaluator reads the
runs and the grade's context (plan.py: the link the nodes ran over, when node 1 was lost)."""
from __future__ import annotations

import statistics

from checker.labs._common import Check, declare, error_result, first_error, not_run
from checker.labs.lab8 import KILL_AFTER, LOSS_TOL, NODES, PER_NODE, STEPS, WHERE, chaos
from checker.labs.lab8.units import MESHES, NAMES
from checker.report import CheckResult

BYTES_TOL = 0.15  # TCP/IP headers (66 bytes per 1448-byte segment, 4.6%) and ACKs ride on the same counters
HIDDEN_SHARE = 0.5  # of the write the checker holds (async_save.WRITE_S), the async save takes this much off
                    # training's path at least: median blocking stall - median async stall
WASTE_TOL = 0.06  # 1 - goodput, relative: a cost left out is >= 12% of it, second-order terms <= 3.1%
INTERVAL_TOL = 0.03  # the interval, relative to Young's sqrt(2 C MTBF): the first-order optima differ by sqrt(C / 2
#                     MTBF), 1.3-1.9% at the hidden numbers (sqrt(2 C MTBF) - C minimises the README's waste table,
#                     C / (tau + C) + (tau + C) / 2 MTBF, exactly); without the 2 is 29% off, without C 2-10x
GOODPUT_BAND = 0.1    # measured - predicted goodput, absolute: see test_lab8_grade for the spread measured
INTERVAL_BAND = 0.15  # the learner's interval / Young-Daly's, for the same C: an interval without C is off 2-10x
EMULATED = "emulated: both nodes on this machine's loopback (no root for network namespaces)"

# Every node check starts with the learner's torchrun options: when those cannot make the job (checked with
# torchrun's own parser, multinode.launch_problem) or the agents never meet, that is the hint, whatever the check.
LAUNCH = ((r"torchrun_args\([^)]*node_rank=|NoRendezvous|no rendezvous",
           f"The job never started: every node check runs under your torchrun options ({WHERE}/launch.py), and the "
           "message says which one cannot make a 2-node job or why the agents never met (checker hint lab8 "
           "launch.torchrun_args)"),)
# the runs of the two-node job: the learner's torchrun options read (plan_nodes), the job, and the unit run of
# make_mesh and check_layout beside it
NODE_RUNS = {"plan_nodes", "nodes", "units"}

CHECKS: list[Check] = []
check = declare(CHECKS)


def _where(ctx) -> str:
    return "two network namespaces over a tbf-shaped veth" if ctx["link"] else EMULATED


def _results(runs, name):
    """(every rank's result, None) or (None, the first error): the plan's (the learner's torchrun_args) first."""
    plan = runs.get(f"plan_{name}")
    if plan is not None and plan.error():
        return None, plan.error()
    run = runs.get(name)
    err = first_error(runs, name)
    if err and err.get("type") in ("Crash", "Timeout"):  # the node runner's own word on why, where it gave one
        said = [ln for ln in (run.log_tail() if run else "").splitlines() if ln.startswith("[checker] no rendezvous")]
        if said:
            return None, {"type": "NoRendezvous", "message": said[-1].removeprefix("[checker] "), "log": ""}
    if err:
        return None, err
    if len(run.results) < run.nproc:
        return None, {"type": "Crash", "message": f"only {len(run.results)} of {run.nproc} ranks reported",
                      "log": run.log_tail()}
    return sorted(run.results, key=lambda r: r.get("rank", 0)), None


def _unit_problem(runs, what) -> str | None:
    """The unit run's word on make_mesh ("mesh") or check_layout ("layout"), or on why it did not say."""
    rs, err = _results(runs, "units")
    if err:
        return f"the unit run of make_mesh and check_layout failed: {err.get('type')}: {err.get('message', '')[:200]}"
    return (mesh_problem if what == "mesh" else layout_problem)(rs[0])


def mesh_problem(r: dict) -> str | None:
    """What make_mesh got wrong at 2 x 1 and 1 x 2 (units.py), in one line, or None."""
    for nodes, per_node in MESHES:
        got = r[f"mesh_{nodes}x{per_node}"]
        want = [[g * per_node + i for i in range(per_node)] for g in range(nodes)]
        call = f"make_mesh({nodes}, {per_node}, 'cpu') on 2 ranks"
        if "rows" not in got:
            return f"{call} raised {got.get('type')}: {got.get('message', '')[:200]}"
        if got["rows"] != want:
            return (f"{call} has rows {got['rows']}, expected {want}: a row is one node's ranks, so the shape is "
                    "(nodes, ranks per node)" + (" (this one is transposed)" if got["rows"] == [list(c) for c in
                                                                                           zip(*want)] else ""))
        if tuple(got["names"]) != NAMES:
            return (f"{call} names its dims {tuple(got['names'])}, expected {NAMES}: mesh['shard'] must be the "
                    "ranks of one node")
    return None


def layout_problem(r: dict) -> str | None:
    """What check_layout did under the misnumbered environment (units.py), if it did not raise."""
    m = r["misnumbered"]
    if m["raised"]:
        return None
    return ("check_layout(2, 1) returned " + str(m["returned"])[:120] + " on 2 ranks whose environment puts RANK 0 "
            "on node 1 (GROUP_RANK 1) and RANK 1 on node 0: it must raise, the ranks are not numbered node by node "
            "(RANK = GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK)")


def needs_root(why: str) -> str:
    """How to run a check that needs a real link (NOT RUN without one: checker/labs/_common.py)."""
    return f"{why}. Run `sudo .venv/bin/checker grade lab8` (CI does), or see {WHERE}/README.md"


def _part_error(rs, part):
    errs = [r[f"{part}_error"] for r in rs if r.get(f"{part}_error")]
    return min(errs, key=lambda e: e.get("t", float("inf"))) if errs else None


@check("multinode_launch", "2 nodes x 2 ranks under your torchrun options (c10d rendezvous): every rank sees "
       "world 4 laid out node by node, your check_layout agrees (and raises on 2 ranks numbered against the "
       "nodes), gloo bound to the interface that reaches node 0 (the veth in each namespace); your options "
       "also make a 3 x 2 job and declare a silent node dead within 3 s",
       f"The job did not come up as 2 nodes x 2 ranks on the right interface ({WHERE}/launch.py); the message "
       "says which: gloo bound where the other node cannot reach it (checker hint lab8 launch.pick_interface), "
       "or a rendezvous that never completes or numbers ranks otherwise: the endpoint, the address each node "
       "advertises, the job's size (checker hint lab8 launch.torchrun_args)", symptoms=LAUNCH,
       runs=NODE_RUNS)
def multinode_launch(c: Check, runs, ctx) -> CheckResult:
    rs, err = _results(runs, "nodes")
    if err:
        return error_result(c, err)
    err = _part_error(rs, "chosen_if") or _part_error(rs, "layout")
    if err:
        return error_result(c, err)
    problems = []
    for r in rs:
        if r["chosen_if"] != r["expected_if"]:
            problems.append(f"rank {r['rank']} (node {r['group_rank']}) chose {r['chosen_if']!r}, but node 0 is "
                            f"reached through {r['expected_if']!r}")
    every = rs[0]["every"]
    for e in every:
        if (e["group_rank"], e["local_rank"]) != divmod(e["rank"], PER_NODE):
            problems.append(f"rank {e['rank']} is local rank {e['local_rank']} of node {e['group_rank']}")
    if ctx["link"]:
        nets = [{e["netns"] for e in every if e["group_rank"] == g} for g in range(NODES)]
        if any(len(s) != 1 for s in nets) or nets[0] == nets[1]:
            problems.append("a node's ranks are not in that node's network namespace")
    want = [[g * PER_NODE + i for i in range(PER_NODE)] for g in range(NODES)]
    bad = [r["rank"] for r in rs if (r["layout"] or {}).get("nodes") != want or (r["layout"] or {}).get("world")
           != NODES * PER_NODE]
    if bad:
        problems.append(f"check_layout on rank {bad[0]} returned {rs[bad[0]]['layout']}, expected world "
                        f"{NODES * PER_NODE}, nodes {want}")
    problems += filter(None, [_unit_problem(runs, "layout")])
    ok = not problems
    return CheckResult(c.name, ok, float(len(every) if ok else 0), float(NODES * PER_NODE), "ranks laid out right",
                       message=(f"{NODES} nodes x {PER_NODE} ranks, gloo on {rs[0]['chosen_if']} / "
                                f"{rs[-1]['chosen_if']} ({_where(ctx)})") if ok else "; ".join(problems[:3]),
                       hint="" if ok else c.hint)


@check("hsdp_equivalence", f"DDP, flat FSDP (1 x 4) and your HSDP (2 x 2 mesh), {STEPS} AdamW steps from the "
       "same weights and data: FSDP's and HSDP's losses equal DDP's; your make_mesh at 2 x 1 and 1 x 2 "
       "holds one node per row, dims named (replicate, shard)",
       f"FSDP and HSDP compute DDP's step, only sharded ({WHERE}/hsdp.py): losses that differ mean the mesh "
       "does not hold every rank once, one node per row (checker hint lab8 hsdp.make_mesh), or not every "
       "parameter is sharded and its gradient reduced over it (checker hint lab8 hsdp.shard_model)",
       symptoms=LAUNCH, runs=NODE_RUNS, crosscheck=True)
def hsdp_equivalence(c: Check, runs, ctx) -> CheckResult:
    rs, err = _results(runs, "nodes")
    err = err or _part_error(rs, "ddp") or _part_error(rs, "fsdp") or _part_error(rs, "hsdp")
    if err:
        return error_result(c, err, "max abs diff")
    ref = [float.fromhex(v) for v in rs[0]["ddp"]["losses"]]
    diffs = {n: max(abs(float.fromhex(a) - b) for a, b in zip(rs[0][n]["losses"], ref)) for n in ("fsdp", "hsdp")}
    worst = max(diffs.values())
    mesh = _unit_problem(runs, "mesh")
    ok = worst <= LOSS_TOL and all(len(rs[0][n]["losses"]) == STEPS for n in ("ddp", "fsdp", "hsdp")) and not mesh
    return CheckResult(c.name, ok, worst, LOSS_TOL, "max abs diff",
                       message=f"{STEPS} steps: FSDP {diffs['fsdp']:.1e}, HSDP {diffs['hsdp']:.1e} from DDP "
                               f"({_where(ctx)})" + (f"; but {mesh}" if mesh else ""), hint="" if ok else c.hint)


def formula(strategy: str, model_bytes: int, g: int = NODES, n: int = PER_NODE) -> float:
    """Bytes through the inter-node link per step, both directions, on gloo (the derivation is in
    solutions/lab8_multinode/hsdp.py): rings in rank order cross the link g times; gloo's reduce-scatter moves
    an all-reduce's bytes."""
    hop = (g * n - 1) / (g * n) * model_bytes  # one ring all-gather's bytes over one hop
    return {"fsdp": g * hop * 3, "hsdp": 2 * (g - 1) * model_bytes, "ddp": g * hop * 2}[strategy]


@check("hsdp_internode_bytes", "bytes through the inter-node veth per step (its own counters) within 15% of "
       "3 g (N-1)/N B for FSDP and 2 (g-1) B for HSDP on gloo (B: model bytes, g nodes, N ranks); HSDP below FSDP",
       f"More bytes crossed the link than the formula ({WHERE}/hsdp.py): most likely a shard group spans the "
       "nodes (a mesh row must be one node's ranks: the transposed mesh all-gathers over the slow link), or "
       "the weights are gathered more than once per step (checker hint lab8 hsdp.make_mesh)", symptoms=LAUNCH,
       runs=NODE_RUNS)
def hsdp_internode_bytes(c: Check, runs, ctx) -> CheckResult:
    if not ctx["link"]:
        return not_run(c, ctx.get("why_no_link") or "the bytes come from a veth's counters between two network "
                       "namespaces, and making them needs root", needs_root("grade as root"))
    rs, err = _results(runs, "nodes")
    err = err or _part_error(rs, "fsdp") or _part_error(rs, "hsdp")
    if err:
        return error_result(c, err, "measured / formula")
    r0 = rs[0]
    ratios = {n: r0[n]["link_bytes_per_step"] / formula(n, r0[n]["param_bytes"]) for n in ("fsdp", "hsdp")}
    worst = max(ratios.values(), key=lambda x: abs(x - 1))
    mesh = _unit_problem(runs, "mesh")
    ok = all(1 - BYTES_TOL <= x <= 1 + BYTES_TOL for x in ratios.values()) and \
        r0["hsdp"]["link_bytes_per_step"] < r0["fsdp"]["link_bytes_per_step"] and not mesh
    kb = {n: r0[n]["link_bytes_per_step"] / 1e3 for n in ("fsdp", "hsdp")}
    return CheckResult(c.name, ok, worst, 1 + BYTES_TOL, "measured / formula",
                       message=f"per step across the link: FSDP {kb['fsdp']:.0f} kB ({ratios['fsdp']:.2f} x formula), "
                               f"HSDP {kb['hsdp']:.0f} kB ({ratios['hsdp']:.2f} x)" + (f"; but {mesh}" if mesh else ""),
                       hint="" if ok else c.hint)


@check("elastic_recovery", f"node 1's workers killed after step {KILL_AFTER}: the job finishes, torchrun "
       "restarted the workers, and every loss is bit-identical to the uninterrupted run's",
       f"A restarted worker knows only the disk ({WHERE}/elastic.py): losses that drift after the restart "
       "mean some state did not come back (the optimizer's moments, the step); a job that starts over found "
       "no checkpoint; no restart at all means torchrun was allowed none (launch.py) "
       "(checker hint lab8 elastic.resume)", symptoms=LAUNCH,
       runs={"plan_elastic", "elastic", "plan_nodes", "nodes"})  # nodes: the uninterrupted run's losses
def elastic_recovery(c: Check, runs, ctx) -> CheckResult:
    rs, err = _results(runs, "elastic")
    err = err or _part_error(rs, "elastic")
    if err:
        return error_result(c, err)
    ref_rs, ref_err = _results(runs, "nodes")
    if ref_err or _part_error(ref_rs, "hsdp"):
        return CheckResult(c.name, False, message="the uninterrupted HSDP run failed (see hsdp_equivalence)",
                           hint=c.hint)
    ref = ref_rs[0]["hsdp"]["losses"]
    e = rs[0]["elastic"]
    start = e["resumed_from"]
    got = e["attempt0"][:start] + e["losses"]
    restarts = sorted({r["restart"] for r in rs})
    problems = []
    if ctx["lost_at"] is None:
        problems.append(f"the job never reached step {KILL_AFTER} with a checkpoint, so no node was lost")
    if start == 0:
        problems.append("after the restart training started again from step 1: resume() did not load the "
                        "checkpoint")
    if got != ref:
        i = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
        problems.append(f"losses differ from the uninterrupted run's at step {i + 1} (resumed after step {start})")
    if max(restarts) != 1:
        problems.append(f"the workers ran with restart counts {restarts}: expected node 1's agent to restart its "
                        "failed workers once (--max-restarts >= 1)")
    ok = not problems
    rec = e["first_step_at"] - ctx["lost_at"] if ctx["lost_at"] and e.get("first_step_at") else float("nan")
    return CheckResult(c.name, ok, rec, None, "s to recover",
                       message=(f"resumed after step {start}, {len(got)} losses bit-identical, recovered in {rec:.1f} s"
                                f" ({_where(ctx)})") if ok else "; ".join(problems), hint="" if ok else c.hint)


@check("async_checkpoint", "an async save takes at least half of the held file write off training's path "
       "(blocking minus async stall, medians of 3 interleaved); a "
       "checkpoint holds the step it was taken at though training goes on during its write (its threads held "
       "until training stepped) and all-reduces beside it; a kill mid-write leaves the previous checkpoint "
       "loadable",
       f"The message names the property that broke ({WHERE}/async_ckpt.py): a save that stalls as long as a "
       "blocking one waits for its own write; a checkpoint holding a later step's weights was written from "
       "tensors training kept changing; save must return once its snapshot exists; a failed all-reduce "
       "means the write's collectives share training's group (checker hint lab8 async_ckpt.save)",
       runs={"async", "async_load"})
def async_checkpoint(c: Check, runs, ctx) -> CheckResult:
    rs, err = _results(runs, "async")
    if err:
        return error_result(c, err, "ms of stall saved per checkpoint")
    r = rs[0]
    problems = []
    if r["reloaded_digest"]["digest"] != r["saved_digest"]:
        problems.append("a checkpoint written while training went on does not hold the weights of its step "
                        + ("(it holds the later ones: the write read the live tensors)"
                           if r["reloaded_digest"]["digest"] == r["moved_on_digest"] else "(it holds other weights)"))
    load, lerr = _results(runs, "async_load")
    if lerr:
        problems.append(f"after a kill mid-write the latest checkpoint does not load: {lerr.get('type')}: "
                        f"{lerr.get('message', '')[:200]}")
    else:
        got = load[0]["loaded"]
        complete = f"step_{r['saved_step']}"
        if got["folder"] != f"step_{r['saved_step'] + 3}" and got["digest"] != r["saved_digest"]:
            problems.append(
                f"after a kill mid-write, `latest` picks {complete}, the last complete checkpoint, but loading it "
                f"gives other weights than were saved at step {r['saved_step']}: did the interrupted save write into "
                "that folder's files?" if got["folder"] == complete else
                f"after a kill mid-write, `latest` loads {got['folder']}, not the last complete checkpoint {complete}")
    med = {k: 1e3 * statistics.median(v) for k, v in r["stalls"].items()}
    hidden, need = med["blocking"] - med["async"], HIDDEN_SHARE * 1e3 * r["write_s"]
    if hidden < need:
        problems.append(f"the async save stalled training {med['async']:.0f} ms against the blocking save's "
                        f"{med['blocking']:.0f} ms: it took {hidden:.0f} ms off training's path, at least {need:.0f} "
                        f"ms expected (each file write is held {1e3 * r['write_s']:.0f} ms; does save() wait for "
                        "its write?)")
    ok = not problems
    return CheckResult(c.name, ok, round(hidden), round(need), "ms of stall saved per checkpoint",
                       message=(f"stall {med['async']:.0f} ms async vs {med['blocking']:.0f} ms blocking; the "
                                "checkpoint holds its step; a kill mid-write leaves the previous one loadable") if ok
                       else "; ".join(problems), hint="" if ok else c.hint)


@check("goodput_formulas", "checkpoint_interval and predict_goodput at a cluster's hidden numbers (saves of "
       "5-60 s, restarts of 2-10 min, a failure every 4-48 h, intervals at half, once and twice the optimum)",
       f"The message gives the inputs and the expected value ({WHERE}/goodput.py): an interval off by a factor "
       "mostly leaves the save cost out of the balance, or balances the wrong costs (checker hint lab8 "
       "goodput.checkpoint_interval); a goodput off by the restart's share, the save stalls' or half an "
       "interval's share of the time leaves that cost out (checker hint lab8 goodput.predict_goodput)",
       runs={"goodput_units"})
def goodput_formulas(c: Check, runs, ctx) -> CheckResult:
    rs, err = _results(runs, "goodput_units")
    if err:
        return error_result(c, err, "worst waste error")
    r, problems, worst = rs[0], [], 0.0
    for case, interval, got in zip(r["cases"], r["interval"], r["goodput"]):
        step_s, save_s, restart_s, mtbf_s, k = case
        want_i, want_g = chaos.young_daly(save_s, mtbf_s), chaos.goodput(*case)
        off = abs((1 - got) / (1 - want_g) - 1)  # the waste, relative: goodput is ~0.97 here, its waste the signal
        worst = max(worst, off)
        if not abs(interval / want_i - 1) <= INTERVAL_TOL:
            problems.append(f"checkpoint_interval(save_s={save_s:.1f}, mtbf_s={mtbf_s:.0f}) returned {interval:.1f} s, "
                            f"the least waste is at {want_i:.1f} s")
        if not off <= WASTE_TOL:
            period = k * step_s + save_s
            problems.append(f"predict_goodput(step_s={step_s:.2f}, save_s={save_s:.1f}, restart_s={restart_s:.0f}, "
                            f"mtbf_s={mtbf_s:.0f}, interval_steps={k}) returned {got:.4f}, expected {want_g:.4f}: "
                            f"a waste of {1 - got:.4f}, not {1 - want_g:.4f} (save stalls {save_s / period:.4f}, "
                            f"restarts {restart_s / mtbf_s:.4f}, lost work {period / 2 / mtbf_s:.4f})")
    ok = not problems
    return CheckResult(c.name, ok, round(worst, 4), WASTE_TOL, "worst waste error",
                       message=f"{len(r['cases'])} cases: intervals within {INTERVAL_TOL:.0%} of sqrt(2 C MTBF), "
                               f"waste (1 - goodput) within {worst:.1%}" if ok else "; ".join(problems[:3]),
                       hint="" if ok else c.hint)


def _resume_problems(r: dict) -> list[str]:
    """Each attempt that got to training resumed from the newest complete checkpoint at its start: the last save
    that returned before its predecessor's kill, or a save that kill interrupted after its commit (not the held one)."""
    ev, kills = r["events"], {k["a"]: k for k in r["kills"]}
    problems = []
    for e in ev:
        if e["ev"] not in ("ready", "error"):
            continue
        before = [x for x in ev if x["a"] < e["a"]]
        done = [x["step"] for x in before if x["ev"] == "saved"]
        last = max(done, default=0)
        open_ = {x["step"] for x in before if x["ev"] == "saving" and x["step"] > last and not kills[x["a"]]["held"]}
        torn = [x["step"] for x in before if x["ev"] == "saving" and kills.get(x["a"], {}).get("held")
                and x["step"] > last]
        # a resume that reads the torn save is either a resume trusting the newest folder, or a save that made the
        # step look complete (its `latest`, or its folder's name) before every file of it was written
        after_torn = (f" (the save of step {torn[-1]} was killed half-written: did resume read it, or did "
                      "save_checkpoint mark it complete before its files were all written?)") if torn else ""
        if e["ev"] == "error":
            said = [ln.strip() for ln in e.get("traceback", "").splitlines() if ln.strip()]
            first = e["message"].splitlines()[0][:200] if e["message"] else ""
            problems.append(f"attempt {e['a']} failed: {e['type']}: {first}" + (f" ... {said[-1][:200]}" if said
                            and said[-1] not in first else "") + f"; the newest complete checkpoint was step "
                            f"{last}{after_torn}")
        elif e["resumed"] != last and e["resumed"] not in open_:
            problems.append(f"attempt {e['a']} resumed from step {e['resumed']}; the newest complete checkpoint "
                            f"was step {last}{after_torn}")
    return problems


@check("goodput_chaos", f"a job using your save_checkpoint and resume, killed at exponential times (MTBF "
       f"{chaos.MTBF_S} s; one kill inside a save) and restarted each time: it finishes with every kept "
       "loss bit-identical to an uninterrupted run's, each restart resumes from the newest complete "
       "checkpoint, the measured goodput is within "
       f"{GOODPUT_BAND} of your prediction, your interval within {INTERVAL_BAND:.0%} of "
       "Young-Daly's for the measured save cost",
       f"The message names what broke ({WHERE}): a restart that crashed or resumed from another step than the "
       "newest complete checkpoint read a torn folder or missed the newest one (checker hint lab8 "
       "elastic.resume); losses that differ mean state did not come back; a goodput far from your prediction "
       "means your model of the time leaves a cost out (checker hint lab8 goodput.predict_goodput)",
       symptoms=((r"\.metadata|CheckpointException|No such file",
                  f"A restart read a checkpoint folder that a kill left half-written ({WHERE}/elastic.py): "
                  "resume must load only what the commit published, never the newest folder on disk "
                  "(checker hint lab8 elastic.resume)"),),
       runs={"goodput_chaos"})
def goodput_chaos(c: Check, runs, ctx) -> CheckResult:
    rs, err = _results(runs, "goodput_chaos")
    if err:
        return error_result(c, err, "|measured - predicted| goodput")
    r = rs[0]
    m, problems = r["measured"], _resume_problems(r)
    if r.get("timeout"):
        problems.append(f"the job did not finish within {r['wall_limit_s']:.0f} s of chaos ({m.get('kept', 0)} of "
                        f"{chaos.STEPS} steps kept after {m.get('failures', 0)} failures)")
    elif r.get("exit") not in (0, None) and not problems:
        problems.append(f"the last attempt exited {r['exit']}")
    if not any(k["held"] for k in r["kills"]) and not r.get("timeout"):
        problems.append(f"no kill landed inside a save: attempt {r['torn_at']} never reached its first save")
    ref = r["reference"]
    kept = {e["step"]: e["loss"] for e in r["events"] if e["ev"] == "step"}
    got = [kept.get(s) for s in range(1, len(ref) + 1)]
    if not problems and got != ref:
        i = next(i for i, (a, b) in enumerate(zip(got, ref)) if a != b)
        problems.append(f"the kept loss of step {i + 1} differs from the uninterrupted run's ({got[i]} vs {ref[i]}): "
                        "some state did not come back with the checkpoint")
    ideal = chaos.young_daly(r["save_cal_s"], chaos.MTBF_S)
    ratio = r["interval_s"] / ideal
    if not abs(ratio - 1) <= INTERVAL_BAND:
        problems.append(f"checkpoint_interval({r['save_cal_s']:.3f}, {chaos.MTBF_S}) = {r['interval_s']:.2f} s, "
                        f"{ratio:.2f} x Young-Daly's {ideal:.2f} s for this save cost and MTBF")
    pred = r.get("predicted")
    gap = abs(m["goodput"] - pred) if pred is not None and m else float("inf")
    if not problems and not gap <= GOODPUT_BAND:
        problems.append(f"measured goodput {m['goodput']:.3f}, your prediction {pred:.3f} (step "
                        f"{m['step_s'] * 1e3:.1f} ms, save {m['save_s'] * 1e3:.0f} ms, restart "
                        f"{m['restart_s'] * 1e3:.0f} ms, every {r['every']} steps, {m['failures']} failures in "
                        f"{m['wall_s']:.1f} s: an MTBF of {m['mtbf_s']:.2f} s)")
    ok = not problems
    msg = (f"{m['failures']} failures in {m['wall_s']:.1f} s (one inside a save), {m['kept']} losses bit-identical; "
           f"goodput {m['goodput']:.3f} measured vs {pred:.3f} predicted; a save every {r['every']} steps "
           f"({r['interval_s']:.2f} s, C {r['save_cal_s'] * 1e3:.0f} ms)") if ok else "; ".join(problems[:3])
    return CheckResult(c.name, ok, round(gap, 3) if gap != float("inf") else gap, GOODPUT_BAND,
                       "|measured - predicted| goodput", message=msg, hint="" if ok else c.hint)
