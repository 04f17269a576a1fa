import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import torch

from labs.common import checkpoint as ckpt

WRITER = textwrap.dedent("""
    import sys, torch
    from labs.common.checkpoint import atomic_save
    path, mode = sys.argv[1], sys.argv[2]
    for i in range(1, 10**6):
        obj = {"v": i, "payload": torch.full((10_000_000,), float(i))}   # 40 MB: ~30 ms to write
        print(f"begin {i}", flush=True)
        if mode == "atomic":
            atomic_save(obj, path)
        else:
            torch.save(obj, path)                                       # truncate, then write
""")


def _kill_during_writes(tmp_path, mode: str, trials: int = 4) -> list[str]:
    """SIGKILL a process a few ms into its second save of one checkpoint (the first completed);
    report what each kill left on disk."""
    outcomes = []
    for t in range(trials):
        path = tmp_path / f"{mode}-{t}.pt"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), mode], stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:  # bounded by the test's timeout
            if line.strip() == "begin 2":
                break
        time.sleep(0.005 + random.Random(t).random() * 0.015)  # inside the ~30 ms write
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        try:
            obj = torch.load(path, weights_only=True)
            ok = bool((obj["payload"] == float(obj["v"])).all())
            outcomes.append("intact" if ok else "mixed")
        except Exception as e:  # noqa: BLE001
            outcomes.append(f"corrupt: {type(e).__name__}")
    return outcomes


def test_kill_during_atomic_save_always_leaves_a_loadable_checkpoint(tmp_path):
    outcomes = _kill_during_writes(tmp_path, "atomic")
    assert outcomes == ["intact"] * len(outcomes), outcomes


def test_the_kill_test_can_fail_a_plain_torch_save(tmp_path):
    """Control: the same kills against a non-atomic writer do corrupt it, so the test above has teeth."""
    outcomes = _kill_during_writes(tmp_path, "plain")
    assert any(o != "intact" for o in outcomes), outcomes


def test_atomic_save_leaves_no_temporary_file(tmp_path):
    ckpt.atomic_save({"a": torch.ones(3)}, tmp_path / "x.pt")
    assert sorted(os.listdir(tmp_path)) == ["x.pt"]


def test_rng_state_round_trip_through_a_weights_only_checkpoint(tmp_path):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    ckpt.atomic_save({"rng": ckpt.rng_state()}, tmp_path / "r.pt")
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(2), np.random.seed(2), torch.manual_seed(2)
    ckpt.set_rng_state(ckpt.load(tmp_path / "r.pt")["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
