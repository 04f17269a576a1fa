import json
import os
import subprocess
import sys

import pytest
import torch

from labs.common import dist as cdist

SMOKE = """
import json, os, sys, torch, torch.distributed as dist
from labs.common import dist as cdist
env = cdist.init(timeout_s=30)
t = torch.tensor([float(env.rank + 1)])
dist.all_reduce(t)
json.dump({"rank": env.rank, "world": env.world_size, "backend": env.backend, "sum": t.item(),
           "threads": torch.get_num_threads()}, open(sys.argv[1] + str(env.rank), "w"))
cdist.teardown()
"""


def test_cpu_means_gloo():
    device, backend = cdist.pick_device("cpu")
    assert (device.type, backend) == ("cpu", "gloo")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_auto_without_gpu_is_cpu_and_cuda_request_fails_clearly():
    assert cdist.pick_device("auto")[0].type == "cpu"
    with pytest.raises(RuntimeError, match="no GPU"):
        cdist.pick_device("cuda")


def test_unknown_device_is_rejected():
    with pytest.raises(ValueError, match="auto"):
        cdist.pick_device("tpu")


def test_without_torchrun_a_single_process(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    env = cdist.init("cpu", cpu_threads=None)
    assert (env.rank, env.world_size, env.is_main, env.distributed) == (0, 1, True, False)


def _two_ranks(tmp_path, source: str) -> list[dict]:
    """Run `source` on 2 CPU ranks under torchrun; each rank writes a JSON dict to argv[1] + its rank."""
    script = tmp_path / "script.py"
    script.write_text(source)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(script), str(tmp_path / "rank")], check=True, timeout=80, capture_output=True,
                   env={**os.environ, "COURSE_DEVICE": "cpu"})
    return [json.loads((tmp_path / f"rank{r}").read_text()) for r in range(2)]


@pytest.mark.timeout(90)
def test_two_ranks_under_torchrun_all_reduce(tmp_path):
    results = _two_ranks(tmp_path, SMOKE)
    assert [r["sum"] for r in results] == [3.0, 3.0]
    assert {r["backend"] for r in results} == {"gloo"} and {r["world"] for r in results} == {2}
    assert {r["threads"] for r in results} == {1}  # ranks don't oversubscribe the cores


TEARDOWN = """
import json, os, sys, time, torch.distributed as dist
from labs.common import dist as cdist
env = cdist.init(timeout_s=30)
store = dist.distributed_c10d._get_default_store()
if env.rank == 0:  # a previous round of this job (torchrun restarts share a store) left its arrivals behind
    store.add("course/teardown/0", 2)
dist.barrier()
if env.rank == 1:
    time.sleep(1.0)  # the last to arrive
arrive = time.time()
cdist.teardown()
json.dump({"arrive": arrive, "left": time.time(), "initialized": dist.is_initialized()},
          open(sys.argv[1] + str(env.rank), "w"))
"""


@pytest.mark.timeout(90)
def test_teardown_waits_for_every_rank_even_on_a_store_with_an_earlier_round(tmp_path):
    """No rank destroys its group before the last one has arrived, though the store already counts two arrivals."""
    r0, r1 = _two_ranks(tmp_path, TEARDOWN)
    assert r0["left"] >= r1["arrive"] and r1["arrive"] - r0["arrive"] > 0.8, (r0, r1)
    assert not r0["initialized"] and not r1["initialized"]
