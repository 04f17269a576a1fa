"""Submit one training job per world size, as a Slurm job array.

    python -m solutions.lab5_scheduler.sweep --world-sizes 1 2 --steps 80

One submission, not N hand-typed sbatch lines: one script and one set of options, no job's tokens/s
measured while another competes for the same cores, and every run still a job of its own: its own
output folder, log and jobcomp record. A sweep that stops at its first failure would also lose the
sizes after it.
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
    # BEGIN SOLUTION Afterwards Slurm holds one submission that trains `script` once for each of world_sizes, in
    #                the environment train.sbatch reads (the sizes in LAB5_WORLD_SIZES, space-separated; each training
    #                picks its own); no two of those trainings ever share the node (scaling_curve reads the
    #                submission's settings back from Slurm), each has a job id, folder and log of its own, the logs land
    #                in `runs` (which may not exist yet), and the caller's extra_sbatch options apply. The return value
    #                is the id Slurm gave the submission, as a string, nothing else.
    # HINT 1         N hand-typed submissions would compete for the same cores. How does Slurm say 'this script N times,
    #                numbered, one at a time', and how does task i find out its world size?
    # HINT 2         sbatch --parsable (prints 'id' or 'id;cluster'), --array=0-(N-1)%1, --output=<runs>/slurm-%j.log;
    #                subprocess.run with env=sbatch_env(...).
    # HINT 3         mkdir runs; cmd = ['sbatch', '--parsable', f'--array=0-{len(world_sizes) - 1}%1',
    #                '--job-name=lab5-sweep', f'--output={runs}/slurm-%j.log', *extra_sbatch, str(script)]; env =
    #                sbatch_env(runs, train_args, LAB5_WORLD_SIZES=' '.join(map(str, world_sizes))); run it (check=True)
    #                and return stdout.strip().split(';')[0]
    # `%1` after the array's index range runs its tasks one at a time.
    Path(runs).mkdir(parents=True, exist_ok=True)
    cmd = ["sbatch", "--parsable", f"--array=0-{len(world_sizes) - 1}%1", "--job-name=lab5-sweep",
           f"--output={Path(runs) / 'slurm-%j.log'}", *extra_sbatch, str(script)]
    env = sbatch_env(runs, train_args, LAB5_WORLD_SIZES=" ".join(map(str, world_sizes)))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return out.strip().split(";")[0]  # --parsable prints "id" or "id;cluster"
    # END SOLUTION


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
