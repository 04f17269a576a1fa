"""Hand-ins that hold the reference's own code: flagged in the class report for the instructor to look at.

The reference's code for each task is what lies between its BEGIN SOLUTION and END SOLUTION markers (the lines
that are not comments: the contract and hint tiers are). A learner file that holds one of those regions token
for token — comments, blank lines and spacing aside — matches the reference's text there. Regions of under
MIN_TOKENS tokens are not evidence (`return total / k` is what anyone writes) and are skipped.
"""
from __future__ import annotations

import io
import tokenize
from pathlib import Path

MIN_TOKENS = 24  # a line or two of code: `optimizer.zero_grad(set_to_none=True)` alone is 10
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def tokens(code: str) -> list[str]:
    """The code's tokens, comments and layout aside; [] where it does not tokenize."""
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in _SKIP]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []


def regions(text: str) -> list[tuple[str, str]]:
    """(the function or class it is in, its code) for each solution region of a reference file (comment lines
    dropped)."""
    out, inside, where = [], None, "module"
    for line in text.splitlines():
        mark = line.strip()
        if inside is None and mark.startswith(("def ", "class ", "async def ")):
            where = mark.split("(")[0].split(":")[0].split()[-1]
        if mark.startswith("# BEGIN SOLUTION"):
            inside = []
        elif mark.startswith("# END SOLUTION"):
            if inside is not None:
                out.append((where, "\n".join(inside)))
            inside = None
        elif inside is not None and not mark.startswith("#"):
            inside.append(line.strip())  # each line alone: the region's indentation is not the point
    return out


def _within(needle: list[str], hay: list[str]) -> bool:
    sep = "\x00"
    return (sep + sep.join(needle) + sep) in (sep + sep.join(hay) + sep)


def copied(learner_folder: Path, reference_folder: Path) -> list[str]:
    """`file.function` for each solution region the learner's copy holds token for token."""
    found = []
    for ref in sorted(reference_folder.rglob("*.py")):
        rel = ref.relative_to(reference_folder)
        mine = learner_folder / rel
        if not mine.is_file():
            continue
        try:
            theirs = tokens(_lines(mine.read_text(errors="replace")))
        except OSError:
            continue
        for where, code in regions(ref.read_text()):
            want, name = tokens(code), f"{rel.with_suffix('').as_posix().replace('/', '.')}.{where}"
            if len(want) >= MIN_TOKENS and _within(want, theirs) and name not in found:
                found.append(name)
    return found


def _lines(text: str) -> str:
    """Each line stripped, as regions() leaves the reference's: indentation does not count either way."""
    return "\n".join(line.strip() for line in text.splitlines())
