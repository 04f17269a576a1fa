"""Write the learners' starters (labs/labN_*/*.py) from the reference (solutions/labN_*/*.py).

    python -m checker.starters           # regenerate labs/ (make starters)
    python -m checker.starters --check   # exit 1 if labs/ differs from what would be generated

In solutions, the learner's part is marked

    # BEGIN SOLUTION <what to write>
    #                <what to write, continued: "#" and 16 spaces, so the words line up>
    ...reference code...
    # END SOLUTION

and becomes `raise NotImplementedError("TODO(labN): <what to write>")` at the same indentation. The hint
is one sentence: lines right after BEGIN that start with "#" and 16 spaces go on with it (joined by one
space), and the TODO the starter gets is cut at spaces to fit WIDTH columns (adjacent string literals, one
echo argument per line, or comment lines). Lab 5 also writes shell (.sbatch, .sh) and Kubernetes YAML:
there a block of code becomes `echo 'TODO(labN): ...' >&2; exit 1`, and a block of comments only
(#SBATCH directives) or any YAML block becomes a `# TODO(labN): ...` comment, so the starter still parses
but lacks what was cut. A block may instead give the starter's own code, commented out after a `# STARTER`
line (lab 4: the starter is the faulty code the learner debugs); those lines are uncommented in place of
the raise. Everything outside the markers is copied, with `solutions.`/`solutions/` paths pointing at
`labs.`/`labs/`. Non-Python files in labs/ (README, notebook) are not touched.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION\b\s*(?P<hint>.*)$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
STARTER = re.compile(r"^\s*# STARTER\s*$", re.M)
MORE = re.compile(r"^(?P<indent>\s*)# {16}(?P<more>\S.*)$")  # the hint goes on, under its first word
WIDTH = 120  # pyproject.toml's line-length: the TODO lines written are cut to fit it
HEADER = ("# GENERATED from solutions/{rel} by `make starters` (checker/starters.py).\n"
          "# This is your copy: {task}. Edits to the course belong in solutions/.\n")


SUFFIXES = (".py", ".sbatch", ".sh", ".yaml")


def _cut(text: str, room: int, keep_space: bool) -> list[str]:
    """`text` cut at single spaces into lines of at most `room` characters (a longer word stays whole). With
    keep_space each line but the last ends in the space it was cut at ("".join(lines) == text), else the
    space is dropped (" ".join(lines) == text)."""
    lines, words = [], []
    for word in text.split(" "):
        if words and len(" ".join(words + [word])) > room:
            lines.append(words)
            words = []
        words.append(word)
    end = " " if keep_space else ""
    return [" ".join(ws) + end for ws in lines] + [" ".join(words)]


def _todo(indent: str, lab: str, hint: str, suffix: str, block: list[str]) -> str:
    if suffix == ".py":  # adjacent literals: the message raised is the one-line hint
        head = f"{indent}raise NotImplementedError("
        lines = _cut(f"TODO({lab}): {hint.replace(chr(34), chr(39))}", WIDTH - len(head) - 3, keep_space=True)
        return head + f"\n{' ' * len(head)}".join(f'"{ln}"' for ln in lines) + ")\n"
    comments_only = all(not ln.strip() or ln.lstrip().startswith("#") for ln in block)
    if suffix == ".yaml" or comments_only:  # a YAML TODO must keep the file YAML; sbatch stops reading
        head = f"{indent}# TODO({lab}): "           # #SBATCH lines at the first command
        lines = _cut(hint, WIDTH - len(head), keep_space=False)
        return head + f"\n{indent}#{' ' * (len(head) - len(indent) - 1)}".join(lines) + "\n"
    # single quotes: a hint that names $SLURM_JOB_ID or `scancel ...` must be printed, not expanded or run;
    # one argument per line: echo joins them with the space they were cut at
    head = f"{indent}echo '"
    lines = _cut(f"TODO({lab}): {hint.replace(chr(39), chr(0x2019))}", WIDTH - len(head) - 13, keep_space=False)
    return head + f"' \\\n{indent}     '".join(lines) + "' >&2; exit 1\n"  # ' -> ’


def strip_solutions(text: str, lab: str, where: str) -> str:
    suffix = next((s for s in SUFFIXES if where.endswith(s)), ".py")
    out, inside, starter, hint, block, more = [], None, False, "", [], False
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        m = BEGIN.match(line)
        c = MORE.match(line) if more else None
        more = False
        if m:
            if inside is not None:
                raise ValueError(f"{where}:{n}: BEGIN SOLUTION inside the block opened at line {inside}")
            inside, starter, indent, block, more = n, False, m["indent"], [], True
            hint = m["hint"].strip()
        elif c and c["indent"] == indent:  # the hint, continued
            hint, more = f"{hint} {c['more'].strip()}".strip(), True
        elif STARTER.match(line) and inside is not None:
            starter = True
        elif END.match(line):
            if inside is None:
                raise ValueError(f"{where}:{n}: END SOLUTION without BEGIN")
            if not starter:
                out.append(_todo(indent, lab, hint or "complete this part", suffix, block))
            inside = None
        elif inside is None:
            out.append(line)
        elif not starter:
            block.append(line)
        elif starter:  # "<indent># code" -> "<indent>code"; a bare "#" line is an empty line
            body = line[len(indent):] if line.startswith(indent) else line.lstrip(" ")
            if not body.startswith("#"):
                raise ValueError(f"{where}:{n}: a line after # STARTER must be commented out")
            body = body[2:] if body.startswith("# ") else body[1:]
            out.append(indent + body if body.strip() else "\n")
    if inside is not None:
        raise ValueError(f"{where}:{inside}: BEGIN SOLUTION never closed")
    body = "".join(out).replace("solutions.lab", "labs.lab").replace("solutions/lab", "labs/lab")
    return body


def generate(root: Path = ROOT) -> dict[Path, str]:
    """{path under labs/: text} for every source file (SUFFIXES) of every lab in solutions/."""
    files = {}
    for src in sorted(p for p in (root / "solutions").glob("lab*/**/*") if p.suffix in SUFFIXES):
        rel = src.relative_to(root / "solutions")
        lab = rel.parts[0].split("_")[0]
        text = strip_solutions(src.read_text(), lab, f"solutions/{rel}")
        task = "find and fix what breaks" if lab == "lab4" else "fill in the TODOs"
        header = HEADER.format(rel=rel, task=task)
        if text.startswith("#!"):  # the shebang stays the first line
            shebang, _, text = text.partition("\n")
            header = shebang + "\n" + header
        files[root / "labs" / rel] = header + text
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on any difference")
    args = ap.parse_args(argv)
    files = generate()
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    orphans = [p for p in sorted((ROOT / "labs").glob("lab*/**/*")) if p.suffix in SUFFIXES and p not in files]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} differs from its generated version: run `make starters`")
        for p in orphans:
            print(f"{p.relative_to(ROOT)} has no solutions/ counterpart: write it there, or delete it")
        return 1 if stale or orphans else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
