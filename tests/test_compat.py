"""The oldest end of the supported torch range, by EMULATION: no release older than the one CI grades on is
installed here, so tests/old_torch/sitecustomize.py takes this torch's public torch.distributed back to how
2.10-2.12 spell it (the two names 2.13 added, gone) in every process these tests start. labs/common/compat.py must
then give the labs those names again: the core collective paths of lab 3 run on two ranks (make test), and lab 3's
whole grade passes (CI's second tier)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, load_json, run_checker
from labs.common import compat

OLD_TORCH = ROOT / "tests" / "old_torch"
EMULATED = {"PYTHONPATH": f"{OLD_TORCH}{os.pathsep}{ROOT}"}

pytestmark = pytest.mark.timeout(240)


def test_this_torch_needs_nothing_filled_in():
    import torch.distributed as dist

    assert compat.missing_names(dist) == [] and compat.install(dist) == []


def test_compat_gives_an_emulated_older_torch_the_names_the_labs_call():
    script = """
import json, torch.distributed as dist
hidden = [n for n in ("reduce_scatter_single", "all_gather_single") if not hasattr(dist, n)]
from labs.common import compat, dist as cdist  # the training core's import installs the names
from checker import doctor
row = doctor.check_versions(supported=compat.SUPPORTED, torch_version="2.10.0")[1]
print(json.dumps({"hidden": hidden, "added": compat.ADDED, "again": compat.install(dist),
                  "same": dist.reduce_scatter_single is dist.reduce_scatter_tensor, "doctor": row.message}))
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, **EMULATED}, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["hidden"] == ["reduce_scatter_single", "all_gather_single"]  # the emulation bites: 2.12's namespace
    assert r["added"] == r["hidden"] and r["again"] == [] and r["same"]  # filled in once, as the old functions
    assert "in the supported range" in r["doctor"] and "adds reduce_scatter_single, all_gather_single" in r["doctor"]


def _ranks(rank, world, store, out):
    """ZeRO-2 by hand (the learner's spelling, dist.reduce_scatter_single / all_gather_single) and FSDP2 (torch's
    own call of dist.all_gather_single), one step each on 2 gloo ranks, against the same step unsharded."""
    import dataclasses

    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist

    hidden = [n for n in compat.RENAMED if not hasattr(dist, n)]
    from labs.common import dist as cdist
    from labs.common.model import GPT, get_config
    from labs.instruments.comm_bytes import CommBytes
    from solutions.lab3_sharding import Zero2Optimizer, apply_fsdp

    comm = CommBytes()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    res = {"hidden": hidden, "added": compat.ADDED}
    cfg = dataclasses.replace(get_config("tiny"), dropout=0.0)  # no dropout: layouts compare exactly
    torch.manual_seed(0)
    model, ref = GPT(cfg), GPT(cfg)
    ref.load_state_dict(model.state_dict())
    x = torch.randint(0, model.cfg.vocab_size, (2 * world, 16), generator=torch.Generator().manual_seed(1))
    mine = x[rank * 2:(rank + 1) * 2]
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    comm.start()
    model(mine, mine)[1].backward()
    opt.step()
    res["calls"] = sorted({r[0] for r in comm.stop()})
    ref(x, x)[1].backward()  # the global batch: the mean of the ranks' means
    ref_opt.step()
    res["zero2_diff"] = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
    torch.manual_seed(0)
    sharded, whole = GPT(cfg), GPT(cfg)
    whole.load_state_dict(sharded.state_dict())
    apply_fsdp(sharded)
    comm.start()
    loss = sharded(mine, mine)[1]
    loss.backward()
    res["fsdp_calls"] = sorted({r[0] for r in comm.stop()})
    every = [None] * world
    dist.all_gather_object(every, loss.item())
    res["fsdp_diff"] = abs(sum(every) / world - whole(x, x)[1].item())
    comm.uninstall()
    cdist.teardown()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(res, f)


def _spawn(rank, world, store, out):
    _ranks(rank, world, store, out)
    os._exit(0)  # as the checker's workers leave: no interpreter shutdown under a gloo thread (test_lab3_units)


def test_lab3s_collective_paths_run_on_an_emulated_older_torch(tmp_path, monkeypatch):
    import torch.multiprocessing as mp

    world = 2
    monkeypatch.setenv("PYTHONPATH", EMULATED["PYTHONPATH"])  # the spawned ranks start as 2.12 would
    mp.start_processes(_spawn, args=(world, tmp_path / "store", tmp_path / "out"), nprocs=world, start_method="spawn")
    for r in (json.loads((tmp_path / f"out.{rank}").read_text()) for rank in range(world)):
        assert r["hidden"] == list(compat.RENAMED) and r["added"] == list(compat.RENAMED), r
        assert r["calls"] == ["all_gather_single", "reduce_scatter_single"], r
        assert "all_gather_single" in r["fsdp_calls"], r  # torch's FSDP2 reached the alias
        assert r["zero2_diff"] < 1e-6 and r["fsdp_diff"] < 1e-5, r


@pytest.mark.slow
@pytest.mark.exhaustive
def test_lab3s_grade_passes_on_an_emulated_older_torch(tmp_path):
    """CI's second tier: the whole of lab 3 (ZeRO by hand, FSDP2, DeepSpeed, DCP) on the emulated 2.12."""
    r = run_checker("grade", "lab3", "--solutions", "--json", tmp_path / "r.json", env=EMULATED, timeout=600)
    report = load_json(tmp_path / "r.json")
    failed = [(c["name"], c["message"]) for c in report["checks"] if c["status"] != "pass"]
    assert r.returncode == 0 and not failed, (failed, r.stderr[-2000:])
