"""The course's generated corpora, as graded runs see them: written before a grade by the course's own code, then
read-only to every run and inside the digest that fails a grade whose course files changed.

Learner code never writes them: a corpus whose metadata a run could rewrite (its entropy floor, its size) would
let a model that never learns pass `loss_decreases`, and in batch grading change the next learner's grade.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCABS = (256, 4096)  # what `make data` writes (Makefile, target `data`) and the labs' models read


def folder(env: dict | None = None) -> Path:
    """Where the corpora live: COURSE_DATA_DIR, else data/ in the course (labs.common.data reads the same)."""
    return Path((env or os.environ).get("COURSE_DATA_DIR") or ROOT / "data")


def ensure(env: dict | None = None) -> None:
    """Write any missing corpus now, with the course's own code in a process of its own (no learner code; the
    checker's process does not import torch). ~10 s the first time, nothing after."""
    base = folder(env)
    if all((base / f"markov-v{v}-s0" / "meta.json").exists() for v in VOCABS):
        return
    subprocess.run([sys.executable, "-m", "labs.common.data", "--vocab", *map(str, VOCABS)], cwd=ROOT, check=True,
                   env={**(env or os.environ), "COURSE_DATA_DIR": str(base), "PYTHONPATH": str(ROOT)},
                   stdout=subprocess.DEVNULL, timeout=300)


def digest(env: dict | None = None) -> dict[str, str]:
    """sha256 of every corpus file, keyed 'data/<corpus>/<file>' (two corpora of ~8 MB: ~20 ms)."""
    base, out = folder(env), {}
    for f in sorted(base.glob("markov-*/*")) if base.is_dir() else []:
        if f.is_file():
            out[f"data/{f.parent.name}/{f.name}"] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out
