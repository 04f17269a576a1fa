"""Shared test helpers: run the checker as a user would, copy a lab tree to break it, find leftovers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checker.seams import link_shared

ROOT = Path(__file__).resolve().parents[1]


def run_checker(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """`python -m checker ...` in a subprocess, as a learner runs it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "checker", *map(str, args)], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def processes_with(marker: str) -> list[int]:
    """PIDs whose command line, working directory or environment contains `marker` (a leftover-process
    detector). Not only the command line: a run forked by the checker's fork server has the server's
    (`python -m checker.forkserver`), but its run folder as working directory and the graded tree in
    its PYTHONPATH."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                seen = [Path(f"/proc/{entry}/{f}").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                        for f in ("cmdline", "environ")] + [os.readlink(f"/proc/{entry}/cwd")]
            except OSError:
                continue
            if any(marker in s for s in seen):
                found.append(int(entry))
    return found


@pytest.fixture
def lab_tree(tmp_path):
    """A private course tree under tmp_path whose labs/ holds a *finished* lab (a copy of the
    solution, or of the starter with learner_from="labs"): a learner's tree that tests may break."""
    def make(lab_folder: str = "lab1_baseline", learner_from: str = "solutions", with_uses: bool = True) -> Path:
        from checker import seams

        uses = next((s.uses for s in seams.SEAMS.values() if s.folder == lab_folder), ()) if with_uses else ()
        for part, src in (("labs", learner_from), ("solutions", "solutions")):
            (tmp_path / part).mkdir(exist_ok=True)
            (tmp_path / part / "__init__.py").write_text("")
            shutil.copytree(ROOT / src / lab_folder, tmp_path / part / lab_folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
            for dep in uses:  # the earlier labs its runs import, finished (lab 5's job: labs 1 and 2)
                if not (tmp_path / part / dep).exists():
                    shutil.copytree(ROOT / "solutions" / dep, tmp_path / part / dep,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
        # the shared core is not an exercise: the copy imports the course's own
        link_shared(tmp_path / "labs", ROOT)
        return tmp_path
    return make


def load_json(path) -> dict:
    return json.loads(Path(path).read_text())


def needs_sandbox():
    """A pytest mark: skip, saying why, where bubblewrap can't run; in CI (CI set) fail instead, so a
    missing sandbox never passes there as a skip."""
    from checker import sandbox

    why = sandbox.why_not()
    if why and os.environ.get("CI"):
        pytest.fail(f"CI must run the sandbox tests: {why}")
    return pytest.mark.skipif(why is not None, reason=f"no sandbox here: {why}")


def no_leftovers(marker: str, wait_s: float = 5.0) -> list[int]:
    """processes_with(marker) once it is empty, or after wait_s (a killed namespace dies in milliseconds)."""
    import time

    deadline = time.monotonic() + wait_s
    while (found := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def _wrapped_collectives() -> tuple[str, ...]:
    """What the course's instruments replace in torch.distributed: CommBytes' ops (CollectiveTimeline's
    all_reduce among them), and barrier."""
    from labs.instruments.comm_bytes import LISTS, OPS
    return (*OPS, *LISTS, "barrier")


@pytest.fixture(autouse=True)
def collectives_put_back():
    """A test that wraps or fakes torch.distributed's collectives in this process puts the real ones back:
    a fake left behind makes a later test's collectives silently do nothing."""
    if "torch.distributed" not in sys.modules:
        yield
        return
    dist = sys.modules["torch.distributed"]
    before = {n: getattr(dist, n, None) for n in _wrapped_collectives()}
    yield
    left = [n for n, f in before.items() if getattr(dist, n, None) is not f]
    for n in left:
        setattr(dist, n, before[n])
    assert not left, f"this test left torch.distributed.{', '.join(left)} replaced (put back now)"


def slurm_can_run_here() -> bool:
    """Root with Slurm's daemons installed: `make slurm-up` starts them (.ci/run does, and fails loudly if it
    cannot install them). Without root (a laptop, macOS) no Slurm can be started here."""
    return os.geteuid() == 0 and all(shutil.which(c) for c in ("slurmctld", "slurmd", "sbatch"))


def first_in_make_test(values) -> list:
    """Parameters of which the first runs in `make test` and the others in `make test-exhaustive` (CI's second
    tier, after make test): one case proves the path in the quick suite, CI proves every case on every landing."""
    return [pytest.param(v, marks=() if i == 0 else pytest.mark.exhaustive) for i, v in enumerate(values)]


def _no_slurm_here(why: str) -> str:
    return f"no Slurm can run here ({why}; not root, or Slurm not installed): `sudo make slurm-up`"


def need_slurm() -> None:
    """Fail where a Slurm could run here but none answers; skip, saying why, where none can run."""
    from checker import slurm

    why = slurm.unavailable()
    if why and slurm_can_run_here():
        pytest.fail(f"Slurm is installed and this is root, so this must run: {why}; start it: `make slurm-up`")
    if why:
        pytest.skip(_no_slurm_here(why))


# The notebooks CI runs in its second tier (make test-exhaustive), not in make test: those of the labs whose reference
# grades are there too (4 and 8: faulty jobs and namespaces), and lab 5's (real Slurm jobs). ~190 s of the ~1,030 s
# make test took with them in a fresh clone, over its 15 minutes.
SECOND_TIER_NOTEBOOKS = ("labs/lab4_debugging/", "labs/lab5_scheduler/", "labs/lab8_multinode/")


def pytest_collection_modifyitems(config, items):
    """Lab 5's notebook submits jobs to a Slurm (its first cell stops where none answers). Where none can run
    here its cells skip, saying why, as need_slurm() skips; where one could, they run (and fail if none answers).
    The notebooks of SECOND_TIER_NOTEBOOKS are marked exhaustive."""
    for it in items:
        if ".ipynb::" in it.nodeid and it.nodeid.startswith(SECOND_TIER_NOTEBOOKS):
            it.add_marker(pytest.mark.exhaustive)
    cells = [it for it in items if it.nodeid.startswith("labs/lab5_scheduler/") and ".ipynb::" in it.nodeid]
    if not cells or slurm_can_run_here():
        return
    from checker import slurm

    why = slurm.unavailable()
    if why:
        for it in cells:
            it.add_marker(pytest.mark.skip(reason=_no_slurm_here(why)))
