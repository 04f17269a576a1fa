# GENERATED from solutions/lab5_scheduler/sweep.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Submit one training job per world size, as a Slurm job array.

    python -m labs.lab5_scheduler.sweep --world-sizes 1 2 --steps 80

One array, not N hand-typed sbatch lines: the array shares one script and one set of options,
can be told to run its tasks one at a time (each gets the node to itself, so no job's tokens/s is
measured while another competes for the same cores), and every task still has a job id of its own: its
own output folder, log and jobcomp record. Dependent jobs (--dependency=afterok:ID) would also
serialise them, and would stop the sweep at the first failure; an array runs them all.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sbatch_env(runs: str | Path, train_args: str, **extra: str) -> dict:
    """The environment train.sbatch reads: where to write, which python, which code, what to train."""
    env = dict(os.environ)
    env.update(LAB5_RUNS=str(runs), LAB5_PYTHON=sys.executable, LAB5_TRAIN_ARGS=train_args,
               COURSE_TARGET=HERE.parent.name, **extra)
    return env


def submit_sweep(world_sizes: list[int], runs: str | Path, train_args: str = "",
                 script: str | Path = HERE / "train.sbatch", extra_sbatch: list[str] = ()) -> str:
    """Submit the array; return its job id (the tasks' own ids are in squeue / the jobcomp file)."""
    raise NotImplementedError("TODO(lab5): One submission of `script` as a job array: one task per world size, at most "
                              "one task running at a time (each measurement gets the node alone), the sizes passed as "
                              "LAB5_WORLD_SIZES (space-separated; task i runs the i-th) in train.sbatch's environment, "
                              "extra_sbatch passed on, the log under `runs` (created if missing). Returns the array's "
                              "job id as a string. (hints: checker hint lab5 sweep.submit_sweep)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--runs", default="runs/lab5")
    args = ap.parse_args(argv)
    job = submit_sweep(args.world_sizes, args.runs, f"--steps {args.steps}")
    print(f"submitted array job {job}: world sizes {args.world_sizes}; watch with `squeue`")


if __name__ == "__main__":
    main()
