"""Launching graded runs: each run is started by the grade's run server (checker/forkserver.py), with a time budget.

Guarantees the checker relies on:
  - every run starts in its own session (process group), so one signal reaches all its ranks;
  - a run that outlives its budget is asked for its Python stacks (SIGUSR1 -> faulthandler in
    the worker), then killed; the stacks become the failed check's evidence;
  - nothing survives a run: its session and descendants are killed when it ends; a process it moved out of
    its tree (double fork, setsid) is re-parented to the server, a child subreaper, and ended when any run
    ends (_sweep); the checker, a subreaper too, kills whatever else of its own is left after each batch of
    runs. Sandboxed (checker/sandbox.py: one bwrap per grade around the server, course read-only, own PID and
    network namespaces), ending the sandbox ends whatever it holds;
  - results come over a pipe per rank opened by the checker's worker before learner code is imported
    (checker/channel.py), with a per-run secret (CHECKER_NONCE, out of the environment before learner code
    runs); nothing after a rank's final result counts; a run whose clock disagrees with the checker's is refused;
  - limits (checker/limits.py), and a run that floods stdout/stderr past LOG_CAP_BYTES is killed.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import signal
import sys
import time
from pathlib import Path
from typing import Callable

from checker import channel, course_data, launch, limits, placement, reach, sandbox
from checker.forkserver import become_subreaper
from checker.run import LOG_CAP_BYTES, Run
from labs.instruments import proctree

REPO_ROOT = Path(__file__).resolve().parents[1]


def reap_orphans(spare: set[int] = frozenset()) -> None:
    """Kill and reap anything of ours still alive (only descendants of this process, but not `spare`)."""
    strays = set(proctree.descendants(os.getpid(), zombies=True)) - set(spare)
    proctree.signal_each(strays, signal.SIGKILL)
    for _ in strays:
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break


def _nonempty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:  # the run's code removed it (the run folder is writable to it)
        return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # the run's code removed its log (the run folder is writable to it)
        return 0


def _tail(path: Path, n: int) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


class Harness:
    """Runs checker.worker tasks for one grade in a private work directory."""

    def __init__(self, workdir: Path, lab: str, target: str, device: str = "auto", root: Path = REPO_ROOT,
                 variant: int = 0, on_progress: Callable[[str], None] | None = None,
                 on_finish: Callable[[Run], None] | None = None, sandboxed: bool = False):
        self.workdir = Path(workdir)
        self.lab, self.target, self.device, self.root = lab, target, device, Path(root)
        self.variant = variant  # 0: the public numbers; >0: an instructor's hidden variant (labs read it)
        self.on_progress = on_progress or (lambda msg: None)
        self.on_finish = on_finish or (lambda run: None)
        become_subreaper()
        self.sandboxed = sandboxed  # the grade's runs in one bwrap (checker/sandbox.py)
        # On GPUs: each live run holds disjoint GPUs (checker/placement.py); None on CPU.
        self.gpus = (placement.GpuPool(placement.visible_gpus(), placement.ranks_per_gpu())
                     if placement.uses_gpu(device) else None)
        # The run servers, by whether their runs are sandboxed; the grade's own is started now, so that its
        # imports overlap the grade's set-up. A sandboxed grade's few runs that need the host (sandbox=False:
        # lab 4's port clash, lab 5's sbatch, lab 8's namespaces) get a second one, without the preload.
        self.servers: dict[bool, launch.ForkServer] = {}
        course_data.ensure(self._env(""))  # the corpora exist before any run, which may only read them
        self.server(sandboxed)

    @property
    def forkserver(self) -> launch.ForkServer:
        """The grade's run server."""
        return self.server(self.sandboxed)

    def server(self, sandboxed: bool, fresh: bool = False, reference: bool = False) -> launch.ForkServer:
        """The live server for runs sandboxed or not, and for the reference's own runs (`reference`: runs that never
        import the learner's code, the only ones whose sandbox shows solutions/ when a learner is graded); started
        anew if it has gone (learner code can kill it or stop it) or `fresh`. Raises launch.ServerGone if it cannot
        start (the checker exits 2)."""
        key = (sandboxed, reference)
        srv = self.servers.get(key)
        if fresh or srv is None or not srv.alive():
            if srv is not None:
                srv.close()
            env = self._env("")
            del env["CHECKER_NONCE"]
            name = "forkserver" + ".host" * (sandboxed != self.sandboxed) + ".reference" * reference
            hidden = [] if reference else reach.hidden(self.root, self.lab, self.target)
            srv = launch.ForkServer(env, self.workdir, self.workdir / f"{name}.log",
                                    wrap=(lambda argv: self._sandboxed(argv, env, hidden)) if sandboxed else None,
                                    preload=sandboxed == self.sandboxed)
            self.servers[key] = srv
        return srv

    def close(self) -> None:
        """Stop the run servers (their runs are finished or killed by then)."""
        for srv in self.servers.values():
            srv.close()

    def _worker_args(self, task: str, out: Path, args: dict, target: str | None = None) -> list[str]:
        return ["--lab", self.lab, "--task", task, "--target", target or self.target, "--root", str(self.root),
                "--out", str(out), "--args", json.dumps(args)]

    def _command(self, task: str, out: Path, args: dict, nproc: int, group: bool = False,
                 launch: list[str] | str | None = None, target: str | None = None) -> list[str]:
        worker = ["-m", "checker.worker", *self._worker_args(task, out, args, target or self.target)]
        if nproc == 1 and not group and launch is None:
            return [sys.executable, *worker]
        if launch is None:
            # The ranks, started directly (checker/spawn.py: env:// rendezvous on a free port below the ephemeral
            # range, the same variables torchrun sets): torchrun's agent would be one more process importing
            # torch per run, ~2 s of CPU each; on 2 cores lab 2's grade takes 55 s with it, 36 s without.
            return [sys.executable, "-m", "checker.spawn", f"--nproc={nproc}", "--", sys.executable, *worker]
        # torchrun with the given options, where the launch itself is what is graded (lab 4's port incident).
        return [sys.executable, "-m", "torch.distributed.run", *launch, "--max-restarts=0", *worker]

    def _env(self, nonce: str) -> dict:
        env = dict(os.environ)
        env["CHECKER_NONCE"] = nonce
        # Python 3.11+: don't put the working directory on sys.path, so a checker/ package that learner
        # code wrote into a run folder can't stand in for the real worker.
        env["PYTHONSAFEPATH"] = "1"
        env.update({
            "PYTHONPATH": os.pathsep.join([str(self.root), str(REPO_ROOT), env.get("PYTHONPATH", "")]),
            "COURSE_DEVICE": self.device, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            "COURSE_DATA_DIR": env.get("COURSE_DATA_DIR", str(REPO_ROOT / "data")),
        })
        env.update(limits.env(cpu=not placement.may_use_gpu(self.device)))
        return env

    def _sandboxed(self, argv: list[str], env: dict, hidden: list[Path]) -> list[str]:
        data = course_data.folder(env)  # written before the grade (Harness.__init__): read-only to every run
        return sandbox.wrap(argv, self.workdir, readable=[self.root, REPO_ROOT, data, *sandbox.python_prefixes()],
                            writable=[], hidden=hidden)

    def run_many(self, specs: list[dict], parallel: int = 2) -> dict[str, Run]:
        """Run specs (dicts: name, task, args, budget_s, nproc=1, group=False, kill_on=None, env=None,
        env_read_late=False, launch=None, argv=None, target=None, relay=None) `parallel` at a time. `target`
        "solutions" runs the reference's code in a run of its own (the reference's server); `relay` (checker/relay.py)
        makes the run take its timed windows in turn with the relay's other runs, which must run at the same time.
        nproc > 1, or group=True (a process group even of one rank), starts the ranks with checker/spawn.py, which
        sets torchrun's environment variables; `launch` (torchrun's options) starts them under torchrun itself
        instead; `env` is added to the run's environment.
        `argv` runs that command instead of a worker (lab 4 runs the course's own faulty job that way): it has
        no result files, only its log, exit status and timing.

        `kill_on` names a file the worker creates (e.g. after a checkpoint); when it appears the run
        is SIGKILLed, as a preemption or an OOM-kill would do. That is a cue, not a failure.
        """
        pending, live, done = list(specs), {}, {}
        self._live = live  # what a relay's sweep spares (checker/relay.py: before the reference's turns)
        try:
            while pending or live:
                while pending and len(live) < parallel:
                    gpus = self._place(pending[0], wait=bool(live))
                    if gpus is False:
                        break  # its GPUs are busy: start it when a live run frees them
                    spec = pending.pop(0)
                    live[spec["name"]] = self._start(spec, gpus)
                for name in list(live):
                    run = self._poll(live[name])
                    if run is not None:
                        if self.gpus is not None and not live[name]["shared_gpus"]:
                            self.gpus.release(live[name]["gpus"])
                        done[name] = run
                        del live[name]
                        self._sweep(live)
                        self.on_finish(run)
                if live:
                    self.on_progress(", ".join(f"{n} {time.monotonic() - s['t0']:.0f}s" for n, s in live.items()))
                    self._await_server(0.05)
        finally:
            for st in live.values():  # interrupted (Ctrl-C): leave nothing behind
                self._kill(st)
                if st["pipes"] is not None:
                    st["pipes"].close()
            reap_orphans(spare={p for srv in self.servers.values() if srv.alive() for p in srv.own})
        return done

    def _await_server(self, timeout_s: float) -> None:
        """Until a server says something (a run ended) or timeout_s: a run's end is seen when it is reported."""
        live = [srv for srv in self.servers.values() if srv.alive()]
        if live:
            select.select(live, [], [], timeout_s)
        else:
            time.sleep(timeout_s)

    def run_phases(self, phases: list[list[dict]], need: set[str], parallel: int = 2) -> dict[str, Run]:
        """Phases in order (a later phase may read what an earlier one wrote, e.g. a checkpoint); within a
        phase, the specs whose name is in `need` run `parallel` at a time. --only skips the rest."""
        runs: dict[str, Run] = {}
        for phase in phases:
            todo = [s for s in phase if s["name"] in need]
            if todo:
                runs.update(self.run_many(todo, parallel=parallel))
        return runs

    def run(self, name: str, task: str, args: dict, budget_s: float, **kw) -> Run:
        return self.run_many([dict(name=name, task=task, args=args, budget_s=budget_s, **kw)], parallel=1)[name]

    def _place(self, spec: dict, wait: bool):
        """The GPUs for this run (None on CPU), or False while they are busy. A run no pool could ever hold
        raises placement.Oversubscribed (the checker exits 2 with its message). The runs of one relay take turns
        (checker/relay.py), so the later ones share the first one's GPUs: on one GPU they must live at once."""
        if self.gpus is None:
            return None
        relay = spec.get("relay")
        if relay is not None and relay.gpus is not None:
            return relay.gpus
        got = self.gpus.acquire(spec.get("nproc", 1))
        if got is None and not wait:
            raise placement.Oversubscribed(f"no free GPU for {spec['name']} and no run to wait for")
        if relay is not None and got is not None:
            relay.gpus = got
        return False if got is None else got

    def _start(self, spec: dict, gpus: list[str] | None = None) -> dict:
        name, nproc = spec["name"], spec.get("nproc", 1)
        # CHECKER_BUDGET_SCALE stretches every budget (a slow laptop) or shrinks it (tests of hangs).
        spec = {**spec, "budget_s": spec["budget_s"] * float(os.environ.get("CHECKER_BUDGET_SCALE", "1"))}
        out = self.workdir / f"{name}.result.json"
        log_path = self.workdir / f"{name}.log"
        args = {**spec.get("args", {}), "workdir": str(self.workdir)}
        log_path.write_bytes(b"")
        nonce = secrets.token_hex(16)
        env = self._env(nonce)
        relay = spec.get("relay")
        pipes = None if spec.get("argv") else channel.Channel(out, nproc, nonce,
                                                              on_turn=relay.on_turn(name) if relay else None)
        target = spec.get("target") or self.target
        if gpus is not None:
            env.update(placement.cuda_env(gpus))
        argv = spec.get("argv") or self._command(spec["task"], out, args, nproc, spec.get("group", False),
                                                 spec.get("launch"), target)
        # A worker task with the runs' own environment may be a fork of the server; a command, or a run with
        # variables of its own that may be read at start-up (as PYTHONPATH is), starts fresh. `env_read_late`: its
        # variables are read only by the run's code as it runs (lab 4's SLURM_NTASKS), so a fork carries them.
        fresh = spec.get("argv") or spec.get("launch") or (spec.get("env") and not spec.get("env_read_late"))
        fork = None if fresh else self._worker_args(spec["task"], out, args, target)
        for attempt in range(2):  # a server that stopped answering is replaced once
            srv = self.server(self.sandboxed and spec.get("sandbox", True), fresh=attempt > 0,
                              reference=target != self.target)
            try:
                proc = srv.launch(fork, argv, None if nproc == 1 and not spec.get("group") else nproc,
                                  {**env, **spec.get("env", {})}, self.workdir, log_path)
                break
            except launch.ServerGone:
                if attempt:
                    if pipes is not None:
                        pipes.close()
                    raise
        kill_on = self.workdir / spec["kill_on"] if spec.get("kill_on") else None
        if relay is not None:
            relay.before_go = lambda who: self._sweep(self._live, spare=relay.pids())  # nothing a run moved out of
            # its own tree (double fork, setsid) works while the other side is timed
            relay.join(name, proc.pid, pipes)
        shared = relay is not None and relay.gpu_owner not in (None, name)  # its GPUs are released by their owner
        if relay is not None and relay.gpu_owner is None:
            relay.gpu_owner = name
        return {"spec": spec, "proc": proc, "t0": time.monotonic(), "out": out, "log": log_path, "pipes": pipes,
                "gpus": gpus, "shared_gpus": shared, "kill_on": kill_on, "nproc": nproc, "nonce": nonce}

    def _poll(self, st: dict) -> Run | None:
        proc, spec = st["proc"], st["spec"]
        elapsed = time.monotonic() - st["t0"]
        timed_out = killed = flooded = False
        if proc.poll() is None:
            if st["kill_on"] is not None and st["kill_on"].exists():
                killed = True
            elif elapsed > spec["budget_s"]:
                timed_out = True
            elif _size(st["log"]) > LOG_CAP_BYTES:
                flooded = True
            else:  # (a leftover thread can't keep a worker alive: it leaves with os._exit after its result)
                return None
            stacks = self._kill(st, dump_stacks=timed_out)
        else:
            stacks = ""
            self._kill(st)  # the launcher exited; make sure no rank or child lingers
        if spec.get("relay") is not None:
            spec["relay"].left(spec["name"])
        if (pipes := st["pipes"]) is not None:
            pipes.close()
        return Run(name=spec["name"], returncode=proc.returncode, seconds=elapsed, timed_out=timed_out,
                   killed_on_cue=killed, flooded=flooded, results=self._results(st), log_path=st["log"], stacks=stacks,
                   nproc=st["nproc"], forked=proc.forked, clock_error=pipes.clock_error() if pipes else None,
                   final=pipes is None or len(pipes.final) >= st["nproc"], marks=dict(pipes.marks) if pipes else {},
                   relay=spec.get("relay"))

    def _sweep(self, live: dict, spare: set[int] = frozenset()) -> None:
        """End what runs left behind: a server's children that are no live run are processes a run moved out
        of its own tree (double fork, setsid), re-parented to the server (a child subreaper)."""
        keep = {st["proc"].pid for st in live.values()} | set(spare)
        for srv in self.servers.values():
            if not srv.pid or srv.pid <= 1:  # never the machine's init
                continue
            for _ in range(20):  # again while any is found: one that forked as it was killed left a child
                strays = [p for p in proctree.children(srv.pid) if p not in keep]
                if not strays:
                    break
                proctree.signal_each({*strays, *proctree.descendants(*strays)}, signal.SIGKILL)
                time.sleep(0.01)

    def _kill(self, st: dict, dump_stacks: bool = False) -> str:
        proc = st["proc"]
        if proc.pid is None:  # it ended before the harness saw it: what it left behind is _sweep's
            proc.wait()
            return ""
        pids = {proc.pid, *proctree.descendants(proc.pid, zombies=True)}
        stacks = ""
        if dump_stacks:  # a run stopped between its turns (checker/relay.py) must run to write its stacks
            proctree.signal_each(pids, signal.SIGCONT)
            proctree.signal_each(pids, signal.SIGUSR1)  # each worker's faulthandler writes its stacks
            files = sorted(self.workdir.glob(f"{st['out'].name}.stacks.*"))  # one per rank that started
            deadline = time.monotonic() + 1.0  # bounded: a rank that blocked SIGUSR1 never writes them
            while not all(map(_nonempty, files)) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.05)  # a dump whose first lines are in has the rest a moment later
            stacks = "\n".join(_tail(p, 4000) for p in files)
        pids |= set(proctree.descendants(*pids, zombies=True))
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proctree.signal_each(pids, signal.SIGKILL)
        proc.wait()
        return stacks

    def _results(self, st: dict) -> list[dict]:
        pipes = st["pipes"]
        if pipes is not None and pipes.results:
            return [pipes.results[r] for r in sorted(pipes.results)]
        files = sorted(p for p in st["out"].parent.glob(st["out"].name + ".rank*")
                       if p.name.split(".rank")[-1].isdigit())
        results = []
        for f in files:
            try:
                r = json.loads(f.read_text())
            except (OSError, ValueError):
                r = {"nonce": st["nonce"], "error": {"type": "BadResult", "message": f"unreadable result {f.name}"}}
            if not isinstance(r, dict) or r.pop("nonce", None) != st["nonce"]:
                r = {"error": {"type": "ForgedResult",
                               "message": f"{f.name} was not written by the checker's worker "
                                          "(a result file the learner's code wrote is ignored)"}}
            results.append(r)
        return results
