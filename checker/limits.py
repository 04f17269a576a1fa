"""Resource limits of a graded run: set by the worker before learner code is imported, reported when hit.

The harness puts them in the run's environment; the worker sets each as soft = hard, so learner code may
lower them but never raise them again (raising a hard limit needs CAP_SYS_RESOURCE, which a sandboxed run
does not have). What they stop, with the tiny model's numbers:
  - address space, CPU runs only (CUDA maps far more address space than it uses): a rank of lab 2 maps
    about 3 GiB, so 16 GiB per process stops a leak or a runaway allocation long before the machine swaps;
  - file size: a tiny model's checkpoint is ~6 MB, so 4 GiB per file stops a disk-filling loop;
  - processes: RLIMIT_NPROC counts every task (threads too) of the user on the machine, so the limit is
    what the user runs now plus 4096; the kernel exempts root from it (the sandbox's PID namespace still
    ends whatever a run forked).
"""
from __future__ import annotations

import os
import resource
import signal

GIB = 2**30
AS_GIB = 16
FSIZE_GIB = 4
NPROC_MORE = 4096

_LIMITS = (("CHECKER_LIMIT_AS_GIB", resource.RLIMIT_AS, GIB), ("CHECKER_LIMIT_FSIZE_GIB", resource.RLIMIT_FSIZE, GIB),
           ("CHECKER_LIMIT_NPROC", resource.RLIMIT_NPROC, 1))


def _tasks_of_user() -> int:
    uid, n = os.getuid(), 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                n += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue
    return n


def env(cpu: bool) -> dict[str, str]:
    """The limits for a run's environment (cpu: the run's device is certainly the CPU)."""
    out = {"CHECKER_LIMIT_FSIZE_GIB": str(FSIZE_GIB), "CHECKER_LIMIT_NPROC": str(_tasks_of_user() + NPROC_MORE)}
    if cpu:
        out["CHECKER_LIMIT_AS_GIB"] = str(AS_GIB)
    return out


def apply() -> dict[str, float]:
    """In the worker, before learner code: set what the environment names. Returns what was set."""
    done = {}
    for var, res, unit in _LIMITS:
        if os.environ.get(var):
            n = int(float(os.environ[var]) * unit)
            try:
                resource.setrlimit(res, (n, n))
                done[var] = float(os.environ[var])
            except (ValueError, OSError):
                pass
    if "CHECKER_LIMIT_FSIZE_GIB" in done:  # a file grown past the limit: an OSError the run reports, not a dead process
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return done


def explain(err: dict) -> dict:
    """An error caused by a limit, said as such ("killed: used more than 16 GiB ...")."""
    text = f"{err.get('type')}: {err.get('message')}"
    if err.get("type") == "MemoryError" or "can't allocate memory" in text or "Cannot allocate memory" in text:
        return {**err, "message": f"killed: used more than {AS_GIB} GiB of address space (each process's limit in "
                                  f"a graded run): {str(err.get('message', ''))[:300]}"}
    if "File too large" in text:
        return {**err, "message": f"stopped: wrote a file over {FSIZE_GIB} GiB (the graded run's limit): "
                                  f"{str(err.get('message', ''))[:300]}"}
    if "Resource temporarily unavailable" in text and "fork" in text.lower():
        return {**err, "message": f"stopped: started too many processes (the graded run's limit): "
                                  f"{str(err.get('message', ''))[:300]}"}
    return err
