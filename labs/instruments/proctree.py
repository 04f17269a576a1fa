"""A launched run as a tree of processes: find every process in it, sample each rank's memory, end them all.

Why a tree and not just a process group: `torchrun` keeps its workers in its own process group, so
signalling the group it was started in reaches launcher and ranks at once. But a launcher may start
its own launcher in a new session (lab 4's run.py does, to kill a hung job as a whole), and that
session is out of reach of our group. So we also walk /proc for every descendant and signal the
groups they lead. Linux only (/proc); elsewhere the tree is just the root.

    pids = descendants(root_pid)            # every process below root, however deep
    end_tree(root_pid, grace_s=3)           # SIGTERM everything, SIGKILL what is left after grace_s
    rank_rss(root_pid)                      # {"rank 0": bytes, "rank 1": bytes} right now
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, parent pid, start time, process group) from /proc/PID/stat, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        fields = raw[raw.rindex(")") + 2:].split()  # the command name, in (), may itself hold spaces
        return fields[0], int(fields[1]), int(fields[19]), int(fields[2])
    except (OSError, ValueError, IndexError):  # gone, or read while it went: the checker's cleanup must not fail
        return None


def identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time): unlike a pid, never reused by another process."""
    st = _stat(pid)
    return (pid, st[2]) if st else None


def same(ident: tuple[int, int]) -> bool:
    """That very process is still running (not another one that was given its pid)."""
    st = _stat(ident[0])
    return st is not None and st[2] == ident[1] and st[0] not in ("Z", "X")


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (exited, not yet reaped by its parent) counts as gone."""
    st = _stat(pid)
    if st is None:
        if not Path("/proc").is_dir():  # no /proc (macOS): ask the kernel
            try:
                os.kill(pid, 0)
                return True
            except (ProcessLookupError, PermissionError):
                return False
        return False
    return st[0] not in ("Z", "X")


def _table(zombies: bool = False) -> dict[int, tuple]:
    """pid -> _stat() of every process in /proc; with `zombies`, also those that exited and wait to be reaped."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    out = {}
    for e in entries:
        if e.isdigit():
            st = _stat(int(e))
            if st and (zombies or st[0] not in ("Z", "X")):
                out[int(e)] = st
    return out


def parent(pid: int) -> int | None:
    """The parent's pid (a zombie's too: it is still its parent's to reap), or None when it is gone."""
    st = _stat(pid)
    return st[1] if st else None


def group(pgid: int) -> list[int]:
    """Every live process of process group `pgid` (those whose parent died are still in it)."""
    return [p for p, st in _table().items() if st[3] == pgid]


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    return [p for p, st in _table().items() if st[1] == pid]


def descendants(*roots: int, zombies: bool = False) -> list[int]:
    """Every process below `roots` (children, grandchildren...), parents before children. Live ones only,
    unless `zombies`: a reaper wants those too, to wait for them."""
    children: dict[int, list[int]] = {}
    for pid, st in _table(zombies).items():
        children.setdefault(st[1], []).append(pid)
    out, todo, seen = [], list(roots), set(roots)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in seen:
                seen.add(c)
                out.append(c)
                todo.append(c)
    return out


def signal_each(pids, sig: int) -> None:
    """Send `sig` to each of `pids` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_tree(root: int, pids: list[int], sig: int, leader: bool) -> None:
    own = os.getpgrp()  # never our own group: that is the notebook's kernel (or pytest)
    groups = {root} if leader else set()
    for pid in [root, *pids]:
        try:
            groups.add(os.getpgid(pid))
        except OSError:
            pass
    for g in groups - {own}:
        try:
            os.killpg(g, sig)
        except OSError:
            pass
    signal_each([root, *pids], sig)  # a process that left its group (setsid) without leading a new one


def end_tree(root: int, grace_s: float = 3.0, reap=None, leader: bool = False) -> list[int]:
    """SIGTERM `root` and every process below it (and the groups they are in), SIGKILL whatever is
    still there after `grace_s`. leader: `root` leads its own process group (it was started with
    start_new_session), so the group is signalled even once `root` itself is gone. `reap`: a callable
    that reaps `root` if it is our child (Popen.poll).
    Returns the pids that were signalled, so a caller (a test) can check they are gone."""
    pids = descendants(root)
    if leader:
        pids += [p for p in group(root) if p not in pids and p != root]
    _signal_tree(root, pids, signal.SIGTERM, leader)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if reap:
            reap()
        pids += [p for p in descendants(root) if p not in pids]  # started while we waited
        if not any(alive(p) for p in [root, *pids]):
            break
        time.sleep(0.05)
    left = [p for p in [root, *pids] if alive(p)]
    if left:
        _signal_tree(root, left, signal.SIGKILL, leader)
        for _ in range(40):
            if reap:
                reap()
            if not any(alive(p) for p in left):
                break
            time.sleep(0.05)
    return [root, *pids]


_rank_of: dict[int, str | None] = {}


def _rank(pid: int) -> str | None:
    """The RANK a launcher gave this process (from its environment), cached per pid."""
    if pid not in _rank_of:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            _rank_of[pid] = next((e[5:].decode() for e in env if e.startswith(b"RANK=")), None)
        except OSError:
            return None
    return _rank_of[pid]


def rss_bytes(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return None


def rank_rss(root: int, fallback: bool = True) -> dict[str, int]:
    """Resident memory of each rank process right now: the top-most process of the tree that carries
    each RANK (its DataLoader workers inherit RANK too, and share pages with it, so they are left out).
    No RANK anywhere (one plain process, or a launcher that has not started its ranks yet): the root,
    as "main process", when `fallback`."""
    pids = [root, *descendants(root)]
    ppid = {p: (_stat(p) or ("", 0, 0, 0))[1] for p in pids}
    out = {}
    for p in pids:
        r = _rank(p)
        if r is not None and _rank(ppid[p]) != r and f"rank {r}" not in out:
            rss = rss_bytes(p)
            if rss is not None:
                out[f"rank {r}"] = rss
    out = dict(sorted(out.items(), key=lambda kv: int(kv[0].split()[1])))
    if not out and fallback and alive(root):
        rss = rss_bytes(root)
        if rss is not None:
            out["main process"] = rss
    return out
