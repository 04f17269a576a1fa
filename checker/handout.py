"""`python -m checker.handout DEST` (`make handout`): the course as a graded class hands it out, without its
reference.

DEST gets every file git tracks but solutions/ and tests/ (the tests grade the reference, and tests/mutants holds
edits of its text). In that copy a learner works and grades themselves as usual; the checks that compare against
the reference's own runs (labs 1 and 2, and all of lab 4, whose incidents are the course's jobs) say NOT RUN
there, naming who grades them: the instructor, whose full copy grades the class's hand-ins with
`checker grade LAB --submissions DIR` (and flags a hand-in that holds the reference's code, checker/likeness.py).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = ("solutions/", "tests/")
NOTE = """# This is a class handout

It is the course without its reference (solutions/) and without its tests, made by `make handout`. Work the labs
and grade yourself as the README says; the checks that compare your code against the reference's own runs say
NOT RUN here, and your instructor grades them from your hand-in.
"""


def files(root: Path = ROOT) -> list[str]:
    """What git tracks, less what a handout leaves out."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and not f.startswith(LEFT_OUT)]


def write(dest: Path, root: Path = ROOT) -> int:
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty: give an empty or new folder")
    n = 0
    for rel in files(root):
        src = root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
            n += 1
    (dest / "HANDOUT.txt").write_text(NOTE)
    return n


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m checker.handout DEST", file=sys.stderr)
        return 2
    n = write(Path(args[0]))
    print(f"{args[0]}: {n} files, no solutions/ and no tests/ (HANDOUT.txt says so)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
