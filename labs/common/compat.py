"""Every difference between the torch releases the course supports, in one place.

The course runs on torch >= 2.10, < 2.16 (pyproject.toml; tests/test_packaging.py keeps the two equal): every
release of the year before the course's last GPU run, 2.10 (21 January 2026) to 2.15 (October 2026), so a GPU node
keeps the tuned torch of its image or module system. CI grades on TESTED, the CPU wheel `make setup` installs into
a fresh venv, and the oldest end by emulation (tests/test_compat.py: TESTED with the newer names hidden; no older
wheel is installed there, so behaviour that changed without a name changing is not covered).

What the labs, solutions and checker call, and since when torch has it (release notes and docs):
    torch.distributed.fsdp.fully_shard, MixedPrecisionPolicy   2.6 (before: torch.distributed._composable.fsdp)
    torch.distributed.tensor (DTensor, parallel, debug)       2.5
    torch.distributed.pipelining (PipelineStage, schedules)   2.4; a stage without example inputs 2.6
    torch.distributed.checkpoint state_dict, Stateful, async  2.4
    torch.utils.checkpoint create_selective_checkpoint_contexts 2.4
    dist.reduce_scatter_single, dist.all_gather_single        2.13 (RENAMED below)
So inside the range the only difference is the pair 2.13 renamed. The floor is 2.10 and not 2.6 because the checks
measure behaviour as well as names (FSDP2's gathers per unit, DCP resharding, pipelining's schedules, DeepSpeed on
top of them): the course promises the releases a GPU node of the last year may carry, and no older one was ever
graded. The cap is the last release out: a new one (which may drop the deprecated spellings, or change more) joins
the range by a CI run, not by accident.

`install()` fills in the newer names on an older torch. labs/common/dist.py calls it on import, so every lab,
solution and checker run that touches the training core sees the same torch.distributed: learners write the names
torch documents today. The checker's own process never imports torch: this module does so only inside install().
"""
from __future__ import annotations

import re

SUPPORTED = ">=2.10,<2.16"  # pyproject.toml's and environment.yml's torch requirement
TESTED = "2.13.0"           # the release CI grades on (Makefile's TORCH_TESTED: a fresh venv gets it)
OLDEST = "2.10"             # the oldest end, graded in CI by emulation (tests/test_compat.py)

# torch 2.13 renamed two collectives, keeping the old spellings as deprecated aliases (pytorch#186124, #186134):
# new name -> the name every supported release before 2.13 has. Same signature, same semantics.
RENAMED = {"reduce_scatter_single": "reduce_scatter_tensor", "all_gather_single": "all_gather_into_tensor"}


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.11.0+cu130' -> (2, 11, 0): the release, its local build tag and any pre-release suffix dropped."""
    release = version.split("+")[0]
    return tuple(int(m.group()) for m in (re.match(r"\d+", part) for part in release.split(".")) if m)


def _cmp(a: tuple, b: tuple) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def in_range(version: str, spec: str = SUPPORTED) -> bool:
    """Does `version` satisfy `spec`, comma-separated clauses of >=, >, <=, <, == (pip's syntax, the subset the
    course uses)? `==2.13.0` matches 2.13.0+cu130, as pip's does."""
    ops = {">=": lambda c: c >= 0, ">": lambda c: c > 0, "<=": lambda c: c <= 0, "<": lambda c: c < 0,
           "==": lambda c: c == 0}
    have = version_tuple(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.fullmatch(r"(>=|<=|==|>|<)\s*([\d.]+)", clause)
        if not m:
            raise ValueError(f"unsupported version clause {clause!r} in {spec!r}")
        if not ops[m[1]](_cmp(have, version_tuple(m[2]))):
            return False
    return True


def missing_names(dist=None) -> list[str]:
    """The newer names this torch.distributed lacks (before install(); [] on 2.13 and later)."""
    if dist is None:
        import torch.distributed as dist
    return [new for new in RENAMED if not hasattr(dist, new)]


ADDED: list[str] = []  # what install() gave this process's torch (checker doctor shows it)


def install(dist=None) -> list[str]:
    """Give an older torch.distributed the names of 2.13 the course calls, as its own older spellings; returns
    the names it added ([] where torch has them). Idempotent. The alias is the same function object, so a
    wrapper installed later (labs/instruments/comm_bytes.py) sees one call, not two."""
    if dist is None:
        import torch.distributed as dist
    added = []
    for new, old in RENAMED.items():
        if not hasattr(dist, new) and hasattr(dist, old):
            setattr(dist, new, getattr(dist, old))
            added.append(new)
    ADDED.extend(added)
    return added


def describe(version: str, added: list[str] | None = None, spec: str = SUPPORTED) -> tuple[bool, str]:
    """(in range?, one line for `checker doctor`): the range, and what this module fills in on this torch."""
    if not in_range(version, spec):
        return False, (f"outside the supported range torch{spec}: the labs may call names this torch lacks or "
                       f"renamed; install one in range (`make setup` installs {TESTED}; GPU nodes: README, "
                       "'CPU and GPU')")
    tested = "CI grades on this release" if version_tuple(version) == version_tuple(TESTED) else \
        f"CI grades on {TESTED}, and on {OLDEST} by emulation"
    filled = f"; labs/common/compat.py adds {', '.join(added)}" if added else ""
    return True, f"in the supported range torch{spec} ({tested}){filled}"
