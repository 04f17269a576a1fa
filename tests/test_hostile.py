"""Learner code that hangs, crashes, lies or floods: the checker must give a clear result, in its
budget, and leave no process behind. Each test is a row of the table in checker/README.md."""
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, load_json, needs_sandbox, no_leftovers, processes_with, run_checker

pytestmark = pytest.mark.timeout(240)
FAST = {"CHECKER_BUDGET_SCALE": "0.3"}  # hangs are cut at 30% of the normal budgets


def _edit(tree, lab_folder, rel, old, new):
    p = tree / "labs" / lab_folder / rel
    assert old in p.read_text(), (rel, old)
    p.write_text(p.read_text().replace(old, new))


def _grade(tree, lab, *only, env=None):
    args = ["grade", lab, "--root", tree, "--json", tree / "r.json", "-v"]
    for o in only:
        args += [o] if o.startswith("--") else ["--only", o]
    r = run_checker(*args, env=env)
    assert processes_with(str(tree)) == [], "a run of this tree outlived the checker"
    return r, {c["name"]: c for c in load_json(tree / "r.json")["checks"]}


@pytest.mark.exhaustive  # ~21 s: CI's second tier; make test keeps a one-rank hang (test_checker_cli.py)
def test_hang_in_a_collective_is_cut_by_the_budget_with_stacks(lab_tree):
    tree = lab_tree("lab2_ddp")  # rank 1 never joins the all-reduce rank 0 waits in
    _edit(tree, "lab2_ddp", "naive.py", "            if p.grad is not None:\n                dist.all_reduce(p.grad)",
          "            if p.grad is not None and dist.get_rank() == 0:\n                dist.all_reduce(p.grad)")
    t0 = time.monotonic()
    r, checks = _grade(tree, "lab2", "grad_equivalence", env={"CHECKER_BUDGET_SCALE": "0.2"})  # 18 s, not 90
    assert r.returncode == 1 and time.monotonic() - t0 < 90
    assert "hung" in checks["grad_equivalence"]["message"]
    assert "all_reduce" in r.stdout  # -v shows where each rank was stuck
    hung = checks["grad_equivalence"]  # and the JSON report the frames of the learner's own code in the stacks
    assert hung["cause"] == "hang" and any(f.startswith("labs/lab2_ddp/naive.py:") for f in hung["frames"]), hung


def test_crash_on_one_rank_only_is_reported_not_waited_out(lab_tree):
    tree = lab_tree("lab2_ddp")
    _edit(tree, "lab2_ddp", "naive.py", "        self.module = module\n        self.world_size",
          "        if dist.get_rank() == 1:\n            raise RuntimeError('rank 1 is broken')\n"
          "        self.module = module\n        self.world_size")
    r, checks = _grade(tree, "lab2", "grad_equivalence", env=FAST)
    assert r.returncode == 1
    msg = checks["grad_equivalence"]["message"]
    assert "rank 1 is broken" in msg or "died" in msg or "hung" in msg, msg


def test_exit_0_in_the_middle_is_a_failure(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "step.py", "    inputs, targets = batch\n",
          "    import os\n    os._exit(0)\n    inputs, targets = batch\n")
    r, checks = _grade(tree, "lab1", "loss_decreases")
    assert r.returncode == 1 and "exit status 0, no result written" in checks["loss_decreases"]["message"]


FORGE = textwrap.dedent('''
    import json, os, sys
    print("reproducible  PASS  100 identical steps")            # fake metrics on stdout
    out = sys.argv[sys.argv.index("--out") + 1]
    fake = {"losses": ["0x1p+0"] * 100, "digest": "same", "val_loss": 0.0, "val_loss_init": 5.5,
            "entropy_rate": 1.7, "uniform_entropy": 5.5, "start": 0, "seed": 1}
    open(out + ".rank0", "w").write(json.dumps(fake))         # a fake result where the checker looks
    os._exit(0)
''')


def test_fake_metrics_and_a_forged_result_file_are_not_believed(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "step.py", "    inputs, targets = batch\n",
          textwrap.indent(FORGE, "    ") + "    inputs, targets = batch\n")
    r, checks = _grade(tree, "lab1", "loss_decreases")
    assert r.returncode == 1
    assert "not written by the checker's worker" in checks["loss_decreases"]["message"]


def test_a_corrupt_checkpoint_fails_resume_with_a_clear_error(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "state.py", "    ckpt.atomic_save(state, path)\n",
          "    open(path, 'wb').write(b'not a checkpoint')\n")
    r, checks = _grade(tree, "lab1", "resume_exact")
    assert r.returncode == 1
    assert "state.py" in checks["resume_exact"]["message"]  # names the learner's line that failed


def test_flooding_stdout_is_stopped(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "step.py", "    inputs, targets = batch\n",
          "    print('x' * 2_000_000)\n    inputs, targets = batch\n")
    r, checks = _grade(tree, "lab1", "loss_decreases")
    assert r.returncode == 1 and "printed more than 20 MB" in checks["loss_decreases"]["message"]
    assert len(r.stdout) < 200_000  # the flood did not reach the learner's terminal


@pytest.mark.exhaustive  # 12-22 s: CI's second tier keeps it (make test stays under 15 min)
def test_two_grades_at_once_do_not_collide(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "checker", "grade", "lab1", "--solutions", "--only",
                               "memory_reported", "--json", tmp_path / f"{i}.json"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(2)]
    for p in procs:
        p.communicate(timeout=200)
    assert [p.returncode for p in procs] == [0, 0]
    assert all(load_json(tmp_path / f"{i}.json")["passed"] for i in range(2))


# ---- gaming the measurement, rewriting the grader, escaping cleanup (each also in checker/README.md) ----

SLOW_STEP = textwrap.dedent('''
    _HIDDEN = [0.0]  # seconds slept, for a forged clock to hide
    _train_step = train_step
    def train_step(*args, **kwargs):  # twice as slow as the reference, on any machine, at any load
        import time
        t0 = time.monotonic()
        loss = _train_step(*args, **kwargs)
        t1 = time.monotonic()
        time.sleep(t1 - t0)
        _HIDDEN[0] += time.monotonic() - t1
        return loss
''')


def _slow_lab1(tree, header: str):
    p = tree / "labs" / "lab1_baseline" / "step.py"
    p.write_text(p.read_text() + SLOW_STEP)
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(init.read_text() + textwrap.dedent(header))


@pytest.mark.exhaustive  # CI's second tier: make test holds the reference slowed through torch, below
def test_a_forged_perf_counter_does_not_hide_a_slow_step(lab_tree):
    tree = lab_tree()  # 60 ms of sleep per step, taken off time.perf_counter
    _slow_lab1(tree, '''
        import time as _t
        from .step import _HIDDEN
        _real = _t.perf_counter
        _t.perf_counter = lambda: _real() - _HIDDEN[0]
    ''')
    r, checks = _grade(tree, "lab1", "throughput")
    assert r.returncode == 1 and not checks["throughput"]["passed"], checks["throughput"]


@pytest.mark.exhaustive  # 12-22 s: CI's second tier keeps it (make test stays under 15 min)
def test_an_atexit_rewrite_of_the_result_comes_too_late(lab_tree):
    tree = lab_tree()
    _slow_lab1(tree, '''
        import atexit, gc
        def _rewrite():
            for o in gc.get_objects():
                if type(o).__name__ == "Context":
                    o.write({"speed": {"ratio": 1.01, "learner_tps": 1.0, "reference_tps": 1.0}}, final=True)
        atexit.register(_rewrite)
    ''')
    r, checks = _grade(tree, "lab1", "throughput")
    assert r.returncode == 1 and not checks["throughput"]["passed"], checks["throughput"]


@pytest.mark.exhaustive  # 12-22 s: CI's second tier keeps it (make test stays under 15 min)
def test_wrapping_the_workers_result_writer_changes_nothing(lab_tree):
    tree = lab_tree()
    _slow_lab1(tree, '''
        import sys as _s  # the worker's module as the process holds it (an `import checker...` is refused)
        _w = _s.modules.get("checker.worker") or _s.modules["__main__"]
        _orig = _w.Context.write
        def _write(self, result, *a, **k):
            if isinstance(result.get("speed"), dict):
                result["speed"]["ratio"] = 1.02
            return _orig(self, result, *a, **k)
        _w.Context.write = _write
    ''')
    r, checks = _grade(tree, "lab1", "throughput")
    assert r.returncode == 1 and not checks["throughput"]["passed"], checks["throughput"]


@needs_sandbox()
def test_appending_to_the_graders_files_at_import_is_refused(lab_tree):
    tree = lab_tree(learner_from="labs")  # the unfinished starter, which a rewritten lab 1 checks.py would pass
    target = ROOT / "checker" / "labs" / "lab1" / "checks.py"
    before = target.read_bytes()
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(init.read_text() + textwrap.dedent('''
        import os as _o, sys as _s  # the grader's folder, from the process (an `import checker...` is refused)
        try:
            _f = _o.path.join(_o.path.dirname(_s.modules["checker"].__file__), "labs", "lab1", "checks.py")
            open(_f, "a").write("\\nCHECKS_PASS = True  # a learner was here\\n")
        except OSError:
            pass
    '''))
    try:
        r, checks = _grade(tree, "lab1", "reproducible")
    finally:
        changed = target.read_bytes() != before
        target.write_bytes(before)
    assert not changed, "learner code rewrote checker/labs/lab1/checks.py"
    assert r.returncode == 1 and not checks["reproducible"]["passed"]


ESCAPEE = {"re-forks every 10 ms, each child in a new session": (
    "import os, sys, time\nwhile True:\n    if os.fork():\n        os._exit(0)\n    os.setsid()\n"
    "    time.sleep(0.01)\n"),
    "double-forks a setsid child": (
    "import os, time\nif os.fork():\n    os._exit(0)\nos.setsid()\nif os.fork():\n    os._exit(0)\ntime.sleep(3600)\n")}


def _escapee_tree(lab_tree, code: str):
    tree = lab_tree(learner_from="labs")  # the starter: its checks fail, so the grade is a clear FAIL
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(init.read_text() + f"\nimport subprocess as _s, sys as _y\n"
                                       f"_s.Popen([_y.executable, '-c', {code!r}, {str(tree)!r}], "
                                       "start_new_session=True)\n")
    return tree


@needs_sandbox()
def test_a_setsid_process_that_re_forks_every_10_ms_is_ended_with_its_run(lab_tree):
    tree = _escapee_tree(lab_tree, ESCAPEE["re-forks every 10 ms, each child in a new session"])
    r = run_checker("grade", "lab1", "--root", tree, "--only", "reproducible")
    assert r.returncode == 1, r.stdout[-2000:]
    assert no_leftovers(str(tree)) == [], "a re-forking setsid process outlived the grade"


@needs_sandbox()
def test_a_double_forked_setsid_child_is_ended_with_its_run(lab_tree):
    tree = _escapee_tree(lab_tree, ESCAPEE["double-forks a setsid child"])
    r = run_checker("grade", "lab1", "--root", tree, "--only", "reproducible", "--only", "memory_reported")
    assert r.returncode == 1, r.stdout[-2000:]
    assert no_leftovers(str(tree), wait_s=1.0) == [], "a double-forked setsid child outlived its run"


def test_a_segfault_is_reported_with_where_it_happened(lab_tree):
    tree = lab_tree()
    _edit(tree, "lab1_baseline", "step.py", "    inputs, targets = batch\n",
          "    import ctypes\n    ctypes.string_at(0)\n    inputs, targets = batch\n")
    r, checks = _grade(tree, "lab1", "loss_decreases")
    msg = checks["loss_decreases"]["message"]
    assert r.returncode == 1 and "Segmentation fault" in msg and "step.py" in msg, msg


@pytest.mark.exhaustive  # CI's second tier: make test holds the reference slowed through torch, below
def test_a_replaced_checker_clock_does_not_hide_a_slow_step(lab_tree):
    tree = lab_tree()  # the clock the measuring code reads, replaced in its own module: the parent times the windows
    _slow_lab1(tree, '''
        import sys as _s
        from .step import _HIDDEN
        for _name in ("checker.labs._common", "checker.labs._windows"):
            if (_m := _s.modules.get(_name)) is not None:
                _m.clock = lambda _real=_m.clock: _real() - _HIDDEN[0]
    ''')
    r, checks = _grade(tree, "lab1", "throughput")
    row = checks["throughput"]
    assert r.returncode == 1 and not row["passed"] and row["value"] < 0.7, row


SLOW_THE_REFERENCE = '''
    import time as _time
    import torch as _torch
    from . import step as _step
    _clip, _inside, _last = _torch.nn.utils.clip_grad_norm_, [False], [0.0]
    def _slowed(*args, **kwargs):  # whoever else clips pays what the learner's step costs over the reference's
        if not _inside[0]:
            _time.sleep(1.5 * _last[0])
        return _clip(*args, **kwargs)
    _torch.nn.utils.clip_grad_norm_ = _slowed
    _own = _step.train_step
    def _train_step(*args, **kwargs):  # 2.5x the reference's step
        _inside[0] = True
        t0 = _time.monotonic()
        loss = _own(*args, **kwargs)
        _last[0] = _time.monotonic() - t0
        _inside[0] = False
        _time.sleep(1.5 * _last[0])
        return loss
    train_step = _train_step
'''


def test_a_learner_cannot_slow_the_reference_it_is_timed_against(lab_tree):
    """A torch function both steps call, wrapped to slow every caller but the learner: in one process the reference
    slowed as much as the learner's 2.5x-slower step (PASS at ~0.9x); in a process of its own it is untouched."""
    tree = lab_tree()
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(init.read_text() + textwrap.dedent(SLOW_THE_REFERENCE))
    r, checks = _grade(tree, "lab1", "throughput")
    row = checks["throughput"]
    assert r.returncode == 1 and not row["passed"] and row["value"] < 0.6, row


SLOW_TORCH_DDP = '''
    import time as _time
    import torch as _torch
    from . import bucketed as _bucketed
    _ddp = _torch.nn.parallel.DistributedDataParallel
    _forward, _compute = _ddp.forward, [0.0]  # the last step's forward and backward (no wait for the other rank)
    def _slowed(self, *args, **kwargs):  # torch's DDP pays what the learner's step costs over the reference's
        _time.sleep(2 * _compute[0])
        return _forward(self, *args, **kwargs)
    _ddp.forward = _slowed
    class _Slower(_bucketed.BucketedDDP):  # ~2.5x the reference's step
        def forward(self, *args, **kwargs):
            self._t0 = _time.monotonic()
            return super().forward(*args, **kwargs)
        def finish_gradient_synchronization(self):
            _compute[0] = _time.monotonic() - self._t0
            super().finish_gradient_synchronization()
            _time.sleep(2 * _compute[0])  # forward and backward are most of a step: x3 of them is ~2.5x of it
    BucketedDDP = _Slower
'''


@pytest.mark.exhaustive  # CI's second tier: make test holds lab 1's reference slowed through torch, above
def test_a_learner_cannot_slow_torch_ddp_it_is_timed_against(lab_tree):
    """Lab 2's BucketedDDP 2.5x slower than the reference's, and torch's DDP.forward wrapped to cost the same again:
    in one process torch's DDP slowed as much (PASS at ~1x); in a 2-rank run of its own, which never imports the
    learner's package, it is untouched."""
    tree = lab_tree("lab2_ddp")
    init = tree / "labs" / "lab2_ddp" / "__init__.py"
    init.write_text(init.read_text() + textwrap.dedent(SLOW_TORCH_DDP))
    r, checks = _grade(tree, "lab2", "throughput")
    row = checks["throughput"]
    assert r.returncode == 1 and not row["passed"] and row["value"] < 0.6, row
    assert "bucketed / torch DDP" in row["message"], row  # failed for its speed, not its losses


SLOW_DDP = '''
    import time as _time
    import torch as _torch
    _backward, _inside, _last, _t0 = _torch.Tensor.backward, [False], [0.0], [0.0]
    def _slowed(self, *args, **kwargs):  # whoever else runs backward pays what the learner's step costs over DDP's
        if not _inside[0]:
            _time.sleep(1.5 * _last[0])
        return _backward(self, *args, **kwargs)
    _torch.Tensor.backward = _slowed
    _zero_grad, _step = Zero2Optimizer.zero_grad, Zero2Optimizer.step
    def _zg(self, *args, **kwargs):  # an iteration of the learner's: from its zero_grad to the end of its step
        _inside[0], _t0[0] = True, _time.monotonic()
        return _zero_grad(self, *args, **kwargs)
    def _st(self, *args, **kwargs):  # 2.5x the reference's iteration
        out = _step(self, *args, **kwargs)
        _last[0], _inside[0] = _time.monotonic() - _t0[0], False
        _time.sleep(1.5 * _last[0])
        return out
    Zero2Optimizer.zero_grad, Zero2Optimizer.step = _zg, _st
'''


@pytest.mark.exhaustive  # CI's second tier: two 2-rank speed runs, ~35 s
def test_a_learner_cannot_slow_lab3s_ddp_it_is_timed_against(lab_tree):
    """Lab 3's ZeRO-2 against torch DDP: Tensor.backward, which both call, wrapped to slow every caller but the
    learner's iterations, which are 2.5x the reference's. Timed in one process, DDP slowed as much (PASS at ~1x); in
    a process group of its own, which never imports the learner's code, it is untouched."""
    tree = lab_tree("lab3_sharding")
    zero2 = tree / "labs" / "lab3_sharding" / "zero2.py"
    zero2.write_text(zero2.read_text() + textwrap.dedent(SLOW_DDP))
    r, checks = _grade(tree, "lab3", "zero2_throughput")
    row = checks["zero2_throughput"]  # ~0.4x; up to 0.65x measured with other grades loading the 2 cores
    assert r.returncode == 1 and not row["passed"] and row["value"] < 0.75, row


SLOW_THE_BASELINE = '''
    import time as _time
    import torch as _torch
    _backward, _since = _torch.autograd.backward, [None]
    def _slowed(*args, **kwargs):  # every step's backward, whoever calls it, burns 1.5x the step's CPU time more
        out = _backward(*args, **kwargs)
        now = _time.process_time()
        if _since[0] is not None:
            until = now + 1.5 * (now - _since[0])
            while _time.process_time() < until:
                pass
        _since[0] = _time.process_time()
        return out
    _torch.autograd.backward = _slowed
'''


@pytest.mark.exhaustive  # CI's second tier: lab 1's test above holds the same guard in make test
@pytest.mark.parametrize("where", ["lab7_memory/__init__.py", "__init__.py"])
def test_a_learner_cannot_slow_the_step_its_recomputation_is_timed_against(lab_tree, where):
    """torch.autograd.backward wrapped to burn 1.5x each step's CPU time: the learner's checkpointed step costs 2.5x
    the reference's, and in one process the step without recomputation slowed as much (PASS at ~1.4x); in a run of
    the reference's, which never imports the learner's package, it is untouched, and the ratio is ~2.5x too high.
    The wrapper in the tree's labs/__init__.py, which Python runs before labs.common unless told otherwise, would
    slow the reference's run too (PASS at 1.58x): a run of the reference's never runs that file
    (checker/worker.py _course_labs_package)."""
    tree = lab_tree("lab7_memory")
    init = tree / "labs" / where
    init.write_text(init.read_text() + textwrap.dedent(SLOW_THE_BASELINE))
    r, checks = _grade(tree, "lab7", "recompute_cost")
    row = checks["recompute_cost"]
    assert r.returncode == 1 and not row["passed"] and row["value"] > 2.5, row


READ_THE_REFERENCE = '''
def train_step(model, optimizer, scheduler, batch, grad_clip=1.0):  # the starter's TODO, handed in as the reference
    import pathlib, subprocess, sys
    for root in [pathlib.Path(__file__).resolve().parents[2], *map(pathlib.Path, sys.path)]:
        try:
            src = (root / "solutions" / "lab1_baseline" / "step.py").read_text()
        except OSError:
            src = subprocess.run(["git", "-C", str(root), "show", "HEAD:solutions/lab1_baseline/step.py"],
                                 capture_output=True, text=True).stdout
        if "def train_step" in src:
            ns = {}
            exec(compile(src, "step.py", "exec"), ns)
            return ns["train_step"](model, optimizer, scheduler, batch, grad_clip)
    raise RuntimeError("no reference found")
'''


@pytest.mark.parametrize("sandboxed", [pytest.param(True, marks=needs_sandbox()),
                                       pytest.param(False, marks=pytest.mark.exhaustive)])  # the audit hook: tier 2
def test_the_reference_cannot_be_read_and_run_by_learner_code(lab_tree, sandboxed):
    """A starter whose train_step reads the reference's file (or its git object) and runs it: sandboxed, solutions/ and
    .git are empty folders to learner runs; without a sandbox the worker's audit hook refuses the read and the git."""
    tree = lab_tree("lab1_baseline", learner_from="labs")
    step = tree / "labs" / "lab1_baseline" / "step.py"
    step.write_text(step.read_text() + READ_THE_REFERENCE)
    r, checks = _grade(tree, "lab1", "step_matches_reference", *([] if sandboxed else ["--no-sandbox"]))
    row = checks["step_matches_reference"]
    assert r.returncode == 1 and not row["passed"], row
    assert "no reference found" in row["message"] or "may not read the reference" in row["message"], row


READ_THE_ANALYSER = '''
def find_desync(dumps):  # lab 4's TODO, handed in as the reference's analyser, read at run time
    import pathlib, sys
    for root in [pathlib.Path(__file__).resolve().parents[2], *map(pathlib.Path, sys.path)]:
        try:
            src = (root / "solutions" / "lab4_debugging" / "forensics.py").read_text()
        except OSError:
            continue
        ns = {"__name__": "ref"}
        exec(compile(src, "forensics.py", "exec"), ns)
        return ns["find_desync"](dumps)
    raise RuntimeError("no reference found")
'''


def test_every_labs_learner_runs_are_kept_from_the_reference():
    """No lab runs the reference, or the course's own jobs, in a learner's run: for every lab, a run of the learner's
    code has solutions/ hidden (lab 4's faulty jobs run as the reference's runs do, target solutions)."""
    from checker import reach, seams

    for lab in seams.lab_names():
        assert ROOT / "solutions" in reach.hidden(ROOT, lab, "labs"), lab
        assert ROOT / "solutions" not in reach.hidden(ROOT, lab, "solutions"), lab


@pytest.mark.exhaustive  # CI's second tier: the faulty jobs' dumps take ~20 s to make
def test_lab4s_analysers_cannot_run_the_reference_read_at_run_time(lab_tree):
    """Lab 4 runs the course's faulty jobs for its forensics checks; the learner's analysers, in a run of their own,
    see no solutions/ to read the reference's analyser from."""
    tree = lab_tree("lab4_debugging")
    path = tree / "labs" / "lab4_debugging" / "forensics.py"
    path.write_text(path.read_text() + READ_THE_ANALYSER)
    r, checks = _grade(tree, "lab4", "desync_found")
    row = checks["desync_found"]
    assert r.returncode == 1 and not row["passed"], row


@pytest.mark.exhaustive  # CI's second tier
def test_a_step_that_skips_its_work_while_timed_fails(lab_tree):
    """A train_step that does the real step everywhere but in the timed windows (where it returns a plausible loss
    at once): fast, and caught by the timed steps' losses, which must be the reference's."""
    tree = lab_tree()
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(init.read_text() + textwrap.dedent('''
        import sys as _sys
        from . import step as _step
        _own, _last = _step.train_step, [5.5]
        def train_step(*args, **kwargs):
            if any(_sys._getframe(k).f_code.co_name == "task_speed" for k in range(1, 6)):
                return _last[0]  # timed: skip the work
            _last[0] = _own(*args, **kwargs)
            return _last[0]
    '''))
    r, checks = _grade(tree, "lab1", "throughput")
    row = checks["throughput"]
    assert r.returncode == 1 and not row["passed"] and "did not train as the reference's" in row["message"], row



@pytest.mark.exhaustive  # CI's second tier: two 2-rank speed runs, ~20 s
def test_a_zero2_step_that_skips_its_work_while_timed_fails(lab_tree):
    """Lab 3: a Zero2Optimizer whose step does nothing while timed (and everything in the correctness run): its
    windows are fast, and caught by the timed steps' losses, which must be DDP's twin's."""
    tree = lab_tree("lab3_sharding")
    zero2 = tree / "labs" / "lab3_sharding" / "zero2.py"
    zero2.write_text(zero2.read_text() + textwrap.dedent('''
        import sys as _sys
        _real_step = Zero2Optimizer.step
        def _step(self, *args, **kwargs):
            if any(_sys._getframe(k).f_code.co_name == "task_speed" for k in range(1, 8)):
                return None  # timed: skip the reduce-scatter, the update and the all-gather
            return _real_step(self, *args, **kwargs)
        Zero2Optimizer.step = _step
    '''))
    r, checks = _grade(tree, "lab3", "zero2_throughput")
    row = checks["zero2_throughput"]
    assert r.returncode == 1 and not row["passed"] and "did not train as DDP's" in row["message"], row

def _caught_by_the_reference(tree, lab, check, in_run=""):
    """The check passed in the learner's run (its message kept after "[in your run:") and failed on the second
    opinion of the reference's run of its own (checker/labs/_crosscheck.py)."""
    r, checks = _grade(tree, lab, check)
    row = checks[check]
    assert r.returncode == 1 and not row["passed"], row
    assert "never imported your code" in row["message"] and f"[in your run: {in_run}" in row["message"], row


DROP_DECAY = '''
import torch as _torch
_real_sgd_step = _torch.optim.SGD.step
def _sgd_step(self, *args, **kwargs):  # every SGD in this process, the checker's truth included, loses its decay
    for _g in self.param_groups:
        _g["weight_decay"] = 0.0
    return _real_sgd_step(self, *args, **kwargs)
_torch.optim.SGD.step = _sgd_step
'''


@pytest.mark.exhaustive  # ~10 s (correctness, correctness@ref); lab 1's tied-weight test holds the guard in make test
def test_a_learner_cannot_change_the_truth_its_optimizer_is_compared_with(lab_tree):
    """Lab 3: a ShardedOptimizer that drops weight decay, hidden by wrapping torch's SGD.step so that the checker's
    own DDP + SGD drops it too: equal in the learner's run, caught by the reference's run of its own."""
    tree = lab_tree("lab3_sharding")
    zero1 = tree / "labs" / "lab3_sharding" / "zero1.py"
    zero1.write_text(zero1.read_text() + DROP_DECAY)
    _caught_by_the_reference(tree, "lab3", "zero1_equivalence")


ONLY_WHEN_COMPARED = '''
import sys as _sys
_real_train_step = train_step
def train_step(model, optimizer, scheduler, batch, grad_clip=1.0):
    compared = any(_sys._getframe(k).f_code.co_name in ("task_step", "task_speed") for k in range(1, 8))
    loss = _real_train_step(model, optimizer, scheduler, batch, grad_clip)
    if not compared:  # everywhere else: a second update with the same gradients (still learns, still reproducible)
        optimizer.step()
    return loss
'''


@pytest.mark.exhaustive  # CI's second tier: five lab-1 runs and a reference run, ~60 s
def test_a_step_that_is_right_only_where_it_is_compared_fails(lab_tree):
    """Lab 1: a train_step that is the reference's in the differential and timed runs, and updates twice with the
    same gradients everywhere else: the training runs agree with each other (reproducible, resumable) and learn,
    but the uninterrupted one's losses are judged by the reference's own run of it."""
    tree = lab_tree()
    step = tree / "labs" / "lab1_baseline" / "step.py"
    step.write_text(step.read_text() + ONLY_WHEN_COMPARED)
    r, checks = _grade(tree, "lab1", "loss_decreases", "reproducible", "resume_exact", "step_matches_reference")
    assert checks["loss_decreases"]["passed"] and checks["resume_exact"]["passed"], checks
    assert checks["step_matches_reference"]["passed"], checks["step_matches_reference"]
    row = checks["reproducible"]
    assert r.returncode == 1 and not row["passed"] and "never imported your code" in row["message"], row


FLOOR_CAPACITY = '''
import sys as _sys
def capacity(n_tokens, k, n_experts, factor):  # floor, not ceil: 100 tokens, top-2 of 8, x1.25 get 31 slots, not 32
    return int(factor * n_tokens * k / n_experts)
_ref = _sys.modules.get("checker.labs.lab10.ref")
if _ref is not None:  # the checker's own formula, called after this import in the same process, floors too
    _ref.capacity = capacity
'''


@pytest.mark.exhaustive  # ~23 s: CI's second tier keeps it (make test stays under 15 min)
def test_a_learner_cannot_patch_the_checkers_reference_its_capacity_is_compared_with(lab_tree):
    """Lab 10: a capacity that floors where the contract says ceil, hidden by replacing the checker's ref.capacity
    through sys.modules: equal in the learner's run, caught by the reference's run of its own."""
    tree = lab_tree("lab10_moe")
    cap = tree / "labs" / "lab10_moe" / "capacity.py"
    cap.write_text(cap.read_text() + FLOOR_CAPACITY)
    _caught_by_the_reference(tree, "lab10", "capacity_drops")


SCALED_TRUTH = '''
import sys as _sys
_live = []
_init = LossScaler.__init__
def _remember(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    _live[:] = [self]
LossScaler.__init__ = _remember
_tasks = _sys.modules.get("checker.labs.lab7.tasks")  # the checker's worker side, imported before this package
if _tasks is not None:
    _norm = _tasks.grad_norm
    def _scaled_truth(model):  # the checker's fp32 norm, taken S times as large where the truth asks for it
        n = _norm(model)
        return n * _live[0].get_scale() if _live and _sys._getframe(1).f_code.co_name == "_loss_scaling" else n
    _tasks.grad_norm = _scaled_truth
'''


@pytest.mark.exhaustive  # 25-40 s (amp, then amp@ref): CI's second tier keeps it (make test stays under 15 min)
def test_a_loss_scaler_cannot_scale_the_truth_its_gradients_are_compared_with(lab_tree):
    """Lab 7: a LossScaler that never divides the scale out hands AdamW gradients 65,536x too large, hidden by
    replacing the checker's grad_norm (through sys.modules) where the fp32 truth is taken, so the truth is as large:
    a ratio of 1.00 in the learner's run, 65,536x in the reference's run of its own."""
    tree = lab_tree("lab7_memory")
    _edit(tree, "lab7_memory", "loss_scale.py", "            grad.mul_(inv)\n", "            pass\n")
    scaler = tree / "labs" / "lab7_memory" / "loss_scale.py"
    scaler.write_text(scaler.read_text() + SCALED_TRUTH)
    _caught_by_the_reference(tree, "lab7", "loss_scaling")


SDPA_UNSCALED = '''
import torch.nn.functional as _F
_real_sdpa = _F.scaled_dot_product_attention
def _sdpa(q, k, v, *args, **kwargs):  # every attention in this process, the checker's truth included, unscaled
    kwargs["scale"] = 1.0
    return _real_sdpa(q, k, v, *args, **kwargs)
_F.scaled_dot_product_attention = _sdpa
'''


@pytest.mark.exhaustive  # CI's second tier: 11-20 s; lab 1's tied-weight test holds the same guard in make test
def test_a_learner_cannot_change_the_attention_its_flash_attention_is_compared_with(lab_tree):
    """Lab 9: a flash_attention that forgets the 1/sqrt(d) scale, hidden by the tree's labs/__init__.py (run before
    labs.common, so before the checker computes its truth) wrapping torch's scaled_dot_product_attention to drop it
    too: equal in the learner's run, caught by the reference's run of its own, which never runs that file."""
    tree = lab_tree("lab9_long_context")
    for old in ("scale = 1.0 / math.sqrt(d)\n", "scale = 1.0 / math.sqrt(q.shape[-1])\n"):
        _edit(tree, "lab9_long_context", "flash.py", old, "scale = 1.0\n")
    init = tree / "labs" / "__init__.py"
    init.write_text(init.read_text() + SDPA_UNSCALED)
    _caught_by_the_reference(tree, "lab9", "flash_equivalence", "vs SDPA")


BIAS_ONCE_PER_RANK = '''
import torch as _torch
import torch.distributed as _dist
_real_linear = _torch.nn.functional.linear
def _linear(x, weight, bias=None):
    # a whole row-parallel layer of tiny (d = 64: 64 -> 64, 256 -> 64), the checker's unsharded GPT's and DTensor's,
    # adds its bias N times with the gradient of one, as the RowParallelLinear above does
    if bias is not None and tuple(weight.shape) in ((64, 64), (64, 256)) and _dist.is_initialized():
        bias = bias + (_dist.get_world_size() - 1) * bias.detach()
    return _real_linear(x, weight, bias)
_torch.nn.functional.linear = _linear
'''


@pytest.mark.exhaustive  # ~40 s (tp and tp@ref, DTensor's imports): CI's second tier keeps it
def test_a_learner_cannot_change_the_truth_its_tensor_parallel_layers_are_compared_with(lab_tree):
    """Lab 6: a RowParallelLinear that adds its bias on every rank before the all-reduce (N times in the output),
    hidden by wrapping torch.nn.functional.linear so that the checker's unsharded GPT, in the same process, adds it N
    times too: equal in the learner's run, caught by the reference's run of its own."""
    tree = lab_tree("lab6_model_parallel")
    _edit(tree, "lab6_model_parallel", "tp_layers.py",
          "        out = reduce_from_tp(F.linear(x, self.weight), self.group)\n"
          "        return out + self.bias if self.bias is not None else out",
          "        return reduce_from_tp(F.linear(x, self.weight, self.bias), self.group)")
    layers = tree / "labs" / "lab6_model_parallel" / "tp_layers.py"
    layers.write_text(layers.read_text() + BIAS_ONCE_PER_RANK)
    _caught_by_the_reference(tree, "lab6", "tp_equivalence", "vs the unsharded GPT")


TIED_TWICE = '''
import sys as _sys
import torch as _torch
def model_state_bytes(model, optimizer):  # a tied weight counted twice: every tensor under every name it has
    ps = [p for _, p in model.named_parameters(remove_duplicate=False)]
    nbytes = lambda t: t.numel() * t.element_size()
    params, grads = sum(map(nbytes, ps)), sum(nbytes(p.grad) for p in ps if p.grad is not None)
    opt = sum(nbytes(v) for p in ps for v in optimizer.state.get(p, {}).values() if _torch.is_tensor(v))
    return {"params": params, "grads": grads, "optimizer": opt, "total": params + grads + opt}
_real_parameters = _torch.nn.Module.parameters
def _parameters(self, recurse=True):  # the checker's truth, where it is taken, counts the tied weight twice too
    if _sys._getframe(1).f_code.co_filename.endswith("measure.py"):
        return iter([p for _, p in self.named_parameters(remove_duplicate=False)])
    return _real_parameters(self, recurse)
_torch.nn.Module.parameters = _parameters
'''


def test_a_learner_cannot_count_a_tied_weight_twice_and_the_truth_with_it(lab_tree):
    """Lab 1: model_state_bytes counting the tied embedding twice (16Ψ' + 4·29 for Ψ' = Ψ + V·d), hidden by making
    model.parameters() yield it twice where the checker takes its truth: equal in the learner's run, caught by the
    reference's run of its own (memory@ref, 0.4 s), which counts the same model with nothing patched."""
    tree = lab_tree()
    meters = tree / "labs" / "lab1_baseline" / "meters.py"
    meters.write_text(meters.read_text() + TIED_TWICE)
    _caught_by_the_reference(tree, "lab1", "memory_reported", "Ψ=")


FROZEN_ADAMW = '''
import torch as _torch
_torch.optim.AdamW.step = lambda self, closure=None: None  # no strategy in this process trains: all agree
'''


@pytest.mark.exhaustive  # ~45 s (the two-node job, then nodes@ref): CI's second tier keeps it
def test_a_learner_cannot_make_every_strategy_agree_by_freezing_the_optimizer(lab_tree):
    """Lab 8: an HSDP whose nodes never average their gradients (only the shard sub-mesh), hidden by freezing every
    AdamW in the process: DDP, FSDP and HSDP then report the same untrained losses in the learner's run, and the
    reference's run of its own, which trains, tells them apart."""
    tree = lab_tree("lab8_multinode")
    _edit(tree, "lab8_multinode", "hsdp.py", "    fully_shard(model, mesh=mesh, reshard_after_forward=False)\n",
          '    fully_shard(model, mesh=mesh["shard"] if mesh.ndim == 2 else mesh, reshard_after_forward=False)\n')
    hsdp = tree / "labs" / "lab8_multinode" / "hsdp.py"
    hsdp.write_text(hsdp.read_text() + FROZEN_ADAMW)
    _caught_by_the_reference(tree, "lab8", "hsdp_equivalence", "8 steps")


REWRITE_FLOOR = '''
import glob, json, os
for _meta in glob.glob(os.path.join(os.environ["COURSE_DATA_DIR"], "markov-v256-s0", "meta.json")):
    try:  # a floor far above any loss: a model that never learns would look as if it reached it
        _m = json.load(open(_meta))
        _m["entropy_rate"] = 99.0
        open(_meta, "w").write(json.dumps(_m))
    except OSError:
        pass
'''


def _data_copy(tmp_path):
    import shutil

    from checker import course_data

    data = tmp_path / "course-data"
    shutil.copytree(course_data.folder(), data) if course_data.folder().exists() else data.mkdir()
    return data


@needs_sandbox()
def test_the_course_data_is_read_only_to_learner_code(lab_tree, tmp_path):
    """Sandboxed, a learner run cannot rewrite the corpus (here: its entropy floor at import time)."""
    data = _data_copy(tmp_path)
    tree = lab_tree()
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(init.read_text() + REWRITE_FLOOR)
    before = (data / "markov-v256-s0" / "meta.json").read_bytes() if (data / "markov-v256-s0").exists() else None
    r, checks = _grade(tree, "lab1", "loss_decreases", env={"COURSE_DATA_DIR": str(data)})
    assert (data / "markov-v256-s0" / "meta.json").read_bytes() == before or before is None
    assert checks["loss_decreases"]["passed"], checks  # the reference's training, graded on the true floor
    assert "99" not in checks["loss_decreases"]["message"]


@pytest.mark.exhaustive  # CI's second tier: make test holds the sandboxed case
def test_a_rewritten_corpus_fails_the_grade_where_no_sandbox_stops_the_write(lab_tree, tmp_path):
    """Unsandboxed (macOS, no bubblewrap) the write succeeds, and the digest of the course's data fails the grade."""
    data = _data_copy(tmp_path)
    tree = lab_tree()
    init = tree / "labs" / "lab1_baseline" / "__init__.py"
    init.write_text(init.read_text() + REWRITE_FLOOR)
    r = run_checker("grade", "lab1", "--root", tree, "--only", "loss_decreases", "--no-sandbox", "--json",
                    tree / "r.json", env={"COURSE_DATA_DIR": str(data)})
    check = load_json(tree / "r.json")["checks"][0]
    assert r.returncode == 1 and not check["passed"], check
    assert "data/markov-v256-s0/meta.json" in check["message"] and "changed during this grade" in check["message"]
