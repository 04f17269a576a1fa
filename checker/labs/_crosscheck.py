"""A second opinion from a process the learner's code never entered.

A correctness run compares the learner's outputs with a truth computed beside them (torch's DDP + SGD, torch's
attention, the checker's fp32 loop). Code in that process can change the truth as easily as its own answer: wrap
a torch function both sides call, and a wrong answer matches a wrong truth. So every value a run compares is also
kept: `keep` writes it to the grade's folder, and the same task runs again on the reference ("<run>@ref", target
solutions: the grade's second run server, which never imports the learner's package). There the same `keep` call
reads the learner's file and measures how far it is from the reference's own value at that point. The parent
(`judge`) turns a PASS into a FAIL when a check declared `crosscheck=True` has any kept value out of tolerance,
or none at all.

The two runs draw the same inputs (seeded generators) and call keep at the same points, so the reference's run
knows what it expects: a key it reaches that the learner's run never kept is a difference too. A value honestly
within a check's tolerance of the in-process truth is within twice it of the reference's (both truths are the
same deterministic computation), so each `keep` passes 2x its check's tolerance.

Worker side: keep (torch). Parent side: twins, second_opinion, judge (no torch).
"""
from __future__ import annotations

from pathlib import Path

SUFFIX = "@ref"


# ---------------------------------------------------------------- worker side
def _folder(workdir: Path, run: str) -> Path:
    return Path(workdir) / "kept" / run


def _leaves(value) -> list:
    """A value's numbers in a fixed order: tensors, floats, ints and bools inside lists, tuples and dicts."""
    if isinstance(value, dict):
        return [x for k in sorted(value, key=str) for x in _leaves(value[k])]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _gap(mine, ref) -> tuple[float, float, str]:
    """(max |mine - ref|, max |ref|, what does not even line up: '' if everything does)."""
    import torch

    a, b = _leaves(mine), _leaves(ref)
    if len(a) != len(b):
        return float("inf"), 0.0, f"{len(a)} values kept, the reference keeps {len(b)}"
    gap = scale = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        x = x.detach().to("cpu", torch.float64) if torch.is_tensor(x) else torch.tensor(float(x), dtype=torch.float64)
        y = y.detach().to("cpu", torch.float64) if torch.is_tensor(y) else torch.tensor(float(y), dtype=torch.float64)
        if x.shape != y.shape:
            return float("inf"), 0.0, f"value {i}: shape {tuple(x.shape)}, the reference's {tuple(y.shape)}"
        if y.numel():
            both = torch.isfinite(x) & torch.isfinite(y)
            if not torch.equal(~torch.isfinite(x), ~torch.isfinite(y)):
                return float("inf"), float(y[both].abs().max()) if both.any() else 0.0, f"value {i}: not finite " \
                    "where the reference's is finite (or the other way round)"
            if both.any():
                gap = max(gap, float((x[both] - y[both]).abs().max()))
                scale = max(scale, float(y[both].abs().max()))
    return gap, scale, ""


def keep(ctx, check: str, key: str, value, rtol: float = 0.0, atol: float = 0.0, why: str = "") -> None:
    """In a graded run: write `value` (tensors and numbers, nested) for the reference's run to judge. In the
    reference's run (ctx.twin_of set): measure the learner's kept value at this point against `value`, allowed
    atol + rtol x max |value|, and note it under `check` for the parent, with `why` (what a difference most likely
    means, where the learner's run compared the value with no truth of its own)."""
    import torch

    if getattr(ctx, "twin_of", None) is None:
        folder = _folder(ctx.workdir, ctx.run)
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(_leaves(value), folder / f"{check}.{key}.rank{ctx.rank}.pt")
        return
    path = _folder(ctx.workdir, ctx.twin_of) / f"{check}.{key}.rank{ctx.rank}.pt"
    note = {"key": key, "rank": ctx.rank, "tol": None, "gap": None, "problem": "", "why": why}
    if not path.exists():
        note["problem"] = "not kept by your run"
    else:
        try:
            mine = torch.load(path, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - whatever the learner's run left there
            note["problem"] = f"unreadable ({type(exc).__name__})"
        else:
            try:
                gap, scale, problem = _gap(mine, value)
            except Exception as exc:  # noqa: BLE001 - a value that is not a number, in a file the learner's run wrote
                gap, scale, problem = float("inf"), 0.0, f"not numbers ({type(exc).__name__})"
            note.update(gap=gap, tol=atol + rtol * scale, problem=problem)
    ctx.crosscheck.setdefault(check, []).append(note)


def anything_kept(workdir: Path, run: str) -> bool:
    folder = _folder(workdir, run)
    return folder.is_dir() and any(folder.iterdir())


# ---------------------------------------------------------------- parent side
def twins(phases: list[list[dict]]) -> list[dict]:
    """One run of the reference per run of `phases` that keeps values ("crosscheck": True in its spec): the same
    task and arguments, target solutions, started after them (a phase of their own). A run launched its own way
    (lab 8's two nodes, under the learner's torchrun options) says in its spec's "twin" how the reference's run of
    the same task is started instead (task, nproc, args)."""
    out = []
    for s in (s for phase in phases for s in phase if s.get("crosscheck")):
        base = {k: v for k, v in s.items() if k in ("task", "nproc", "group", "budget_s", "args")}
        base.update(s.get("twin", {}))
        out.append({**base, "name": s["name"] + SUFFIX, "target": "solutions",
                    "args": {**base.get("args", {}), "twin_of": s["name"]}})
    return out


def second_opinion(h, checks, runs: dict, phases: list[list[dict]], *rest) -> dict:
    """The reference's runs of the compared runs whose checks passed in the learner's run, started now (after the
    grade's other runs, so never beside a timed one), as {name: Run}. A check that already failed needs no second
    opinion: a wrong answer, a starter and a mutant cost no reference run. `rest`: what else the lab's evaluators
    read (lab 8: the grade's context)."""
    specs = {s["name"]: s for phase in phases for s in phase if s.get("crosscheck")}
    want = set()
    for c in checks:
        if not getattr(c, "crosscheck", False):
            continue
        try:
            passed = c.evaluate.__wrapped__(c, runs, *rest).passed  # the check's own verdict, before the judge
        except Exception:  # noqa: BLE001 - an evaluator that cannot read a run decides nothing here
            passed = False
        if passed:
            want |= {n for n in c.runs if n in specs and n in runs}
    todo = twins([[specs[n] for n in sorted(want)]])
    return h.run_many(todo, parallel=2) if todo else {}


def judge(c, runs: dict, result):
    """`result` as the check decided it in the learner's run, unless the reference's runs disagree: a PASS of a
    check declared crosscheck=True needs every value kept for it within tolerance of the reference's."""
    if not getattr(c, "crosscheck", False) or not result.passed:
        return result
    twins_ = [runs[n + SUFFIX] for n in sorted(c.runs) if n + SUFFIX in runs]
    if not twins_:
        return _failed(c, result, "the reference's run of its own, which judges what your run compared, did not run")
    notes = []
    for t in twins_:
        err = t.error()
        if err:
            return _failed(c, result, f"the reference's run of its own ({t.name}) failed: {err.get('type')}: "
                                      f"{err.get('message', '')[:300]}")
        notes += [n for r in t.results for n in r.get("crosscheck", {}).get(c.name, [])]
    if not notes:
        return _failed(c, result, "your run kept none of the values the reference's run compares")
    bad = [n for n in notes if n["problem"] or n["gap"] > n["tol"]]
    if not bad:
        return result
    n = bad[0]
    what = n["problem"] or f"max |yours - reference's| {n['gap']:.3g} > tolerance {n['tol']:.3g}"
    why = n.get("why") or ("In your own run they matched the checker's truth: does your code change a function that "
                           "both your code and the checker call (torch's, the course's)?")
    return _failed(c, result, f"{len(bad)} of {len(notes)} values differ from the reference's, computed in a run "
                              f"that never imported your code; first: {n['key']} on rank {n['rank']}: {what}. {why}")


def _failed(c, result, why: str):
    from dataclasses import replace

    return replace(result, passed=False, message=f"{why} [in your run: {result.message}]" if result.message else why)
