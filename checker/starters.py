"""Write the learners' starters (labs/labN_*/*.py) and their hints from the reference (solutions/labN_*/*.py).

    python -m checker.starters           # regenerate labs/ (make starters)
    python -m checker.starters --check   # exit 1 if labs/ differs from what would be generated
    python -m checker.starters --tasks   # every learner task: its name, where it is, its contract

In solutions, the learner's part is marked

    # BEGIN SOLUTION <the contract: what must hold afterwards, why, the arithmetic to reason with>
    #                <the contract, continued: "#" and 16 spaces, so the words line up>
    # HINT 1         <tier 1: the concept, and the question to ask yourself>
    # HINT 2         <tier 2: the shape of the solution: which collective, which hook, which structure>
    # HINT 3         <tier 3: the recipe>
    ...reference code...
    # END SOLUTION

and becomes `raise NotImplementedError("TODO(labN): <contract> (hints: checker hint labN <task>)")` at the same
indentation. Each part is one paragraph: lines that start with "#" and 16 spaces go on with the part above them
(joined by one space). The TODO is cut at spaces to fit WIDTH columns (adjacent string literals, one echo argument
per line, or comment lines). The tiers go, encoded so that a glance does not give one away, into the lab's
hints.json, which `checker hint` reveals one tier at a time (checker/hints.py). A task's name is derived from
where the block sits: "<file stem>.<enclosing function>" (leading underscores dropped; a block in __init__ takes
its class's name; at module level the stem alone; in a shell or YAML file "<file name>.<n>"), with ".2", ".3"
for a name met again in the same file.

Lab 5 also writes shell (.sbatch, .sh) and Kubernetes YAML: there a block of code becomes
`echo 'TODO(labN): ...' >&2; exit 1`, and a block of comments only (#SBATCH directives) or any YAML block becomes
a `# TODO(labN): ...` comment, so the starter still parses but lacks what was cut. A block may instead give the
starter's own code, commented out after a `# STARTER` line (lab 4: the starter is the faulty code the learner
debugs); those lines are uncommented in place of the raise, and its tiers still become hints. Everything outside
the markers is copied, with `solutions.`/`solutions/` paths pointing at `labs.`/`labs/`. Other files in labs/
(README, notebook) are not touched.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from checker import hints

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION\b\s*(?P<hint>.*)$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
STARTER = re.compile(r"^\s*# STARTER\s*$", re.M)
TIER = re.compile(r"^(?P<indent>\s*)# HINT (?P<tier>[1-9])\s+(?P<text>\S.*)$")
MORE = re.compile(r"^(?P<indent>\s*)# {16}(?P<more>\S.*)$")  # a part goes on, under its first word
DEF = re.compile(r"^(?P<indent>\s*)(?:async\s+)?(?P<kind>def|class)\s+(?P<name>\w+)")
WIDTH = 120  # pyproject.toml's line-length: the TODO lines written are cut to fit it
HEADER = ("# GENERATED from solutions/{rel} by `make starters` (checker/starters.py).\n"
          "# This is your copy: {task}. Edits to the course belong in solutions/.\n")


SUFFIXES = (".py", ".sbatch", ".sh", ".yaml")


@dataclass
class Task:
    """One learner part: where the starter has it, what must hold, and its hint tiers (plain text)."""
    name: str
    file: str            # the solution file's path under solutions/, e.g. "lab2_ddp/bucketed.py"
    line: int            # the TODO's line in the generated starter
    contract: str
    tiers: list[str] = field(default_factory=list)


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


def _task_names(text: str, where: str) -> list[str]:
    """Each block's task name, in order, from the defs and classes around it (the module docstring's rule; a
    method whose name is met again in the file takes its class's name too: tp_layers.CopyToTP.backward)."""
    fname = where.rsplit("/", 1)[-1]
    if not fname.endswith(".py"):
        return [f"{fname}.{k}" for k in range(1, sum(bool(BEGIN.match(ln)) for ln in text.splitlines()) + 1)]
    stem, stack, found, inside = fname[:-3], [], [], False
    for line in text.splitlines():
        if BEGIN.match(line):
            here = len(line) - len(line.lstrip())
            while stack and stack[-1][0] >= here:
                stack.pop()
            inner = stack[-1] if stack else None
            outer = stack[-2] if len(stack) > 1 and stack[-2][1] == "class" else None
            if inner and inner[2] == "__init__" and outer:
                inner, outer = outer, None
            short = f"{stem}.{inner[2].lstrip('_') or inner[2]}" if inner else stem
            found.append((short, f"{stem}.{outer[2].lstrip('_')}.{inner[2].lstrip('_')}" if outer else short))
            inside = True
        elif END.match(line):
            inside = False
        elif not inside and line.strip() and not line.lstrip().startswith("#"):
            here = len(line) - len(line.lstrip())
            while stack and stack[-1][0] >= here:
                stack.pop()
            if d := DEF.match(line):
                stack.append((here, d["kind"], d["name"]))
    shorts = [s for s, _ in found]
    names = [s if shorts.count(s) == 1 else q for s, q in found]
    return [n if names[:k].count(n) == 0 else f"{n}.{names[:k].count(n) + 1}" for k, n in enumerate(names)]


def parse(text: str, lab: str, where: str, first_line: int = 1) -> tuple[str, list[Task]]:
    """The starter's text for one solution file, and its tasks (their lines counted from first_line: the
    header the caller puts above the text)."""
    suffix = next((s for s in SUFFIXES if where.endswith(s)), ".py")
    out, inside, starter, block, part = [], None, False, [], None
    names = iter(_task_names(text, where))
    tasks, parts, indent = [], {}, ""
    written = first_line  # the line the next text appended to `out` starts on

    def emit(piece: str) -> None:
        nonlocal written
        out.append(piece)
        written += piece.count("\n")

    for n, line in enumerate(text.splitlines(keepends=True), 1):
        m = BEGIN.match(line)
        t = TIER.match(line) if part is not None else None
        c = MORE.match(line) if part is not None else None
        if m:
            if inside is not None:
                raise ValueError(f"{where}:{n}: BEGIN SOLUTION inside the block opened at line {inside}")
            inside, starter, indent, block = n, False, m["indent"], []
            part, parts, name = 0, {0: m["hint"].strip()}, next(names)
        elif t and t["indent"] == indent:  # a hint tier; the tiers come in order, 1, 2, 3
            tier = int(t["tier"])
            if tier != part + 1:
                raise ValueError(f"{where}:{n}: HINT {tier} after {'the contract' if not part else f'HINT {part}'}"
                                 f"; the tiers go 1, 2, 3 in order")
            part, parts[tier] = tier, t["text"].strip()
        elif c and c["indent"] == indent:  # the part above, continued
            parts[part] = f"{parts[part]} {c['more'].strip()}".strip()
        elif STARTER.match(line) and inside is not None:
            starter, part = True, None
        elif END.match(line):
            if inside is None:
                raise ValueError(f"{where}:{n}: END SOLUTION without BEGIN")
            contract = parts[0] or "complete this part"
            tiers = [parts[k] for k in sorted(parts) if k]
            tasks.append(Task(name, where.removeprefix("solutions/"), written, contract, tiers))
            if not starter:
                todo = f"{contract} (hints: checker hint {lab} {name})" if tiers else contract
                emit(_todo(indent, lab, todo, suffix, block))
            inside, part = None, None
        elif inside is None:
            emit(line)
        elif not starter:
            part = None  # the code has begun: a "#" + 16 spaces line in it is the code's own comment
            block.append(line)
        else:  # after # STARTER: "<indent># code" -> "<indent>code"; a bare "#" line is an empty line
            body = line[len(indent):] if line.startswith(indent) else line.lstrip(" ")
            if not body.startswith("#"):
                raise ValueError(f"{where}:{n}: a line after # STARTER must be commented out")
            body = body[2:] if body.startswith("# ") else body[1:]
            emit(indent + body if body.strip() else "\n")
    if inside is not None:
        raise ValueError(f"{where}:{inside}: BEGIN SOLUTION never closed")
    body = "".join(out).replace("solutions.lab", "labs.lab").replace("solutions/lab", "labs/lab")
    return body, tasks


def strip_solutions(text: str, lab: str, where: str) -> str:
    """The starter's text for one solution file (parse() without the tasks)."""
    return parse(text, lab, where)[0]


def generate(root: Path = ROOT) -> dict[Path, str]:
    """{path under labs/: text} for every source file (SUFFIXES) of every lab in solutions/, and for each lab
    folder that has tasks its hints file (checker/hints.py reads it)."""
    files, tasks = {}, {}
    for src in sorted(p for p in (root / "solutions").glob("lab*/**/*") if p.suffix in SUFFIXES):
        rel = src.relative_to(root / "solutions")
        lab = rel.parts[0].split("_")[0]
        task = "find and fix what breaks" if lab == "lab4" else "fill in the TODOs"
        header = HEADER.format(rel=rel, task=task)
        text, found = parse(src.read_text(), lab, f"solutions/{rel}", first_line=1 + header.count("\n"))
        if text.startswith("#!"):  # the shebang stays the first line
            shebang, _, text = text.partition("\n")
            header = shebang + "\n" + header
        files[root / "labs" / rel] = header + text
        tasks.setdefault((lab, rel.parts[0]), []).extend(found)
    for (lab, folder), found in tasks.items():
        if found:
            files[root / "labs" / folder / hints.FILE] = hints.dumps(lab, [vars(t) for t in found])
    return files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 on any difference")
    ap.add_argument("--tasks", action="store_true", help="list every task: name, starter line, contract")
    args = ap.parse_args(argv)
    files = generate()
    if args.tasks:
        for p in sorted(p for p in files if p.name == hints.FILE):
            for t in hints.loads(files[p])["tasks"]:
                print(f"{t['name']:<34} labs/{t['file']}:{t['line']}  [{len(t['tiers'])} tiers]  {t['contract']}")
        return 0
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    orphans = [p for p in sorted((ROOT / "labs").glob("lab*/**/*"))
               if (p.suffix in SUFFIXES or p.name == hints.FILE) and p not in files]
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
