"""Graded runs in a bubblewrap sandbox (Debian/Ubuntu: `apt-get install bubblewrap`), one per grade.

The grade's run server (checker/forkserver.py) is started inside it, so every run of the grade is a fork
of a process that already imported torch, as outside. Inside, learner code sees:
  - the whole file system read-only (the course tree, the virtualenv, the learner's folder with it);
  - one writable folder, the grade's run folder (checkpoints, logs, the result channel), and a private,
    empty /tmp; the course's data folder is read-only like the rest (checker/course_data.py writes the
    corpora before the grade);
  - its own PID namespace: bwrap is the namespace's init, and when it dies the kernel kills every
    process in it, whatever it forked and whichever session it moved to (`setsid` escapes end too);
    within the grade, a run's leftovers are re-parented to the server and ended when the run ends;
  - its own network namespace with loopback only: gloo rendezvous on 127.0.0.1 works, nothing
    reaches out and no port clashes with anything outside;
  - --die-with-parent: if the checker dies, so does the sandbox.
The runs of one grade share the sandbox (its processes, its loopback), as the ranks of one job share a node.
Limits (address space, file size) are set by checker/worker.py before learner code is imported, soft
= hard, so learner code cannot raise them (bwrap drops every capability, CAP_SYS_RESOURCE included).

On a GPU node the NVIDIA device files are bound in (they are all /dev exposes besides null, zero,
random, tty, shm, pts). Where bwrap is missing or cannot create namespaces, `why_not()` says so.
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

INSTALL = "sudo apt-get install bubblewrap"  # the Debian/Ubuntu package (Fedora: dnf install bubblewrap)
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")


@functools.lru_cache(maxsize=1)
def why_not() -> str | None:
    """None if runs can be sandboxed here, else one line saying why not."""
    if os.environ.get("CHECKER_SANDBOX") == "0":
        return "CHECKER_SANDBOX=0"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap is not installed ({INSTALL})"
    try:  # user/PID/network namespaces may be off (a container, a kernel setting): try once
        r = subprocess.run([bwrap, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                            "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap does not run here ({e})"
    if r.returncode != 0:
        return f"bubblewrap cannot create namespaces here ({r.stderr.strip().splitlines()[-1:] or r.returncode})"
    return None


def _namespaces() -> list[str]:
    return ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]


def gpu_binds(pattern_root: str = "") -> list[str]:
    """--dev-bind for each NVIDIA (and DRI) device file present (pattern_root: a fake /dev, for tests)."""
    out = []
    for pattern in GPU_DEVICES:
        for dev in sorted(d for d in glob.glob(pattern_root + pattern)
                          if not os.path.isdir(d)):  # bwrap makes the folders
            out += ["--dev-bind", dev, dev[len(pattern_root):]]
    return out


def repository_dirs(root: Path) -> list[Path]:
    """The git folders holding `root`'s history (the reference in every commit): its .git folder, or for a
    worktree the repository its .git file points to."""
    git = Path(root) / ".git"
    if git.is_dir():
        return [git]
    try:
        text = git.read_text()
    except OSError:
        return []
    if not text.startswith("gitdir:"):
        return []
    own = (git.parent / text.split(":", 1)[1].strip()).resolve()  # <repo>/.git/worktrees/<name>
    common = own.parents[1] if own.parent.name == "worktrees" else own
    return [common]


def wrap(argv: list[str], workdir: Path, readable: list[Path], writable: list[Path],
         dev_root: str = "", hidden: list[Path] = ()) -> list[str]:
    """argv run by bwrap in a fresh sandbox. `readable` are folders re-bound read-only after the
    private /tmp hides the host's (a course tree under /tmp stays visible); `writable` are bound read-write;
    `hidden` folders are seen empty (an empty tmpfs over each: the learner's runs never see the reference)."""
    cmd = [shutil.which("bwrap") or "bwrap", *_namespaces(),
           "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for p in dict.fromkeys(str(Path(p).resolve()) for p in readable if Path(p).exists()):
        cmd += ["--ro-bind", p, p]
    for p in dict.fromkeys(str(Path(p).resolve()) for p in [workdir, *writable] if Path(p).exists()):
        cmd += ["--bind", p, p]
    for p in dict.fromkeys(str(Path(p).resolve()) for p in hidden if Path(p).is_dir()):
        cmd += ["--tmpfs", p, "--remount-ro", p]
    cmd += gpu_binds(dev_root)
    cmd += ["--chdir", str(Path(workdir).resolve()), "--setenv", "TMPDIR", "/tmp", "--", *argv]
    return cmd


def python_prefixes() -> list[Path]:
    """The interpreter and virtualenv (they may live under /tmp in a test's throwaway venv)."""
    return [Path(p) for p in {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}]


def course_digest(root: Path | None = None) -> dict[str, str]:
    """sha256 of every file of what learner code must never change: the grader (checker/), the reference
    (solutions/), the course's shared packages (labs/common, labs/instruments, labs/notebook) and its data
    (checker/course_data.py). ~300 files, ~20 MB: tens of milliseconds."""
    import hashlib

    root = Path(root) if root else Path(__file__).resolve().parents[1]
    out = {}
    from checker.seams import SHARED

    for part in ("checker", "solutions", *(f"labs/{p}" for p in SHARED)):
        for f in sorted((root / part).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and not f.name.endswith(".pyc"):
                try:
                    out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
                except OSError:
                    out[str(f.relative_to(root))] = "unreadable"
    from checker import course_data

    course_data.ensure()  # a corpus first written during a grade would read as learner code's change to it
    return out | course_data.digest()


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files added, removed or rewritten between two course_digest()s."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
