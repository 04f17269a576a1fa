"""What a learner's run can reach: never the reference or the repository's history.

The checks compare the learner's outputs with the reference's, computed in runs of the reference's own (target
solutions: lab 4's faulty jobs too). So a learner run needs neither solutions/ nor the git objects that hold every
commit of it, and sees neither:
  - sandboxed (checker/sandbox.py), they are empty folders in the learner's runs (`hidden`);
  - where no sandbox runs (macOS, no bubblewrap), the worker adds an audit hook (PEP 578) before the learner's
    code is imported, which refuses opening a file there, and starting `git` or a command that names them. An
    audit hook cannot be removed; native code can still get around it, which is what the sandbox is for.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
_LAUNCHES = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")


def hidden(root: Path, lab: str, target: str) -> list[Path]:
    """Folders a run of `target`'s code for `lab` must not see (the reference's runs see everything)."""
    from checker import sandbox

    roots = {Path(root).resolve(), REPO_ROOT}
    out = [d for r in roots for d in sandbox.repository_dirs(r)]
    if target == "labs":
        out += [r / "solutions" for r in roots]
    return out


def guard(paths: list[Path]) -> None:
    """From now on, this process (and its forks) cannot open a file under `paths` or launch a command on them."""
    if not paths:
        return
    real = tuple(dict.fromkeys(os.path.realpath(p) for p in paths))
    under = tuple(p + os.sep for p in real)
    names = (*real, *dict.fromkeys(os.path.basename(p) + os.sep for p in real))  # a path, or one relative to the root

    def refuse(what: str):
        raise PermissionError(f"{what}: graded code may not read the reference or the repository's history "
                              "(the checker compares your code against it in runs of its own)")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path = args[0]
            if isinstance(path, (str, bytes, os.PathLike)):
                p = os.path.realpath(os.fsdecode(path))
                if p in real or p.startswith(under):
                    refuse(f"open({os.fsdecode(path)!r})")
        elif event in _LAUNCHES:
            words = " ".join(os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else " ".join(
                os.fsdecode(x) for x in a if isinstance(x, (str, bytes, os.PathLike)))
                for a in args if isinstance(a, (str, bytes, os.PathLike, list, tuple)))
            tokens = words.split()
            if any(os.path.basename(t) == "git" for t in tokens[:2]) or any(n in words for n in names):
                refuse(f"starting {words[:80]!r}")

    sys.addaudithook(hook)
