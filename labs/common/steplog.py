"""The JSONL step log every training script writes, and its reader. No torch here: a notebook kernel
that only watches a run (labs/notebook/dashboard.py) reads logs without loading it. labs.common.metrics
re-exports both."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


class StepLog:
    """One JSON object per line, flushed as written, so a killed run keeps every finished step.

    Opened in append mode: a resumed run continues the same file, and a reader keeps the last
    record for each step.
    """

    def __init__(self, path: str | os.PathLike | None, rank: int = 0):
        self.rank = rank
        self.f = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.f = open(path, "a", buffering=1)

    def write(self, **record) -> dict:
        record = {"rank": self.rank, "time": time.time(), **record}
        if self.f is not None:
            self.f.write(json.dumps(record) + "\n")
        return record

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def read_log(path: str | os.PathLike) -> list[dict]:
    """Records of a step log, the last one kept for each (rank, step)."""
    by_key = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            by_key[(r.get("rank", 0), r.get("step"))] = r
    return sorted(by_key.values(), key=lambda r: (r.get("step") or 0, r.get("rank", 0)))
