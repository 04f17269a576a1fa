"""The lab 2 reference at its edges: BucketedDDP with fp32 and bf16 parameters under one bucket cap."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

MIXED = textwrap.dedent('''
    import json, sys
    import torch
    from labs.common import dist as cdist
    from solutions.lab2_ddp import BucketedDDP

    env = cdist.init("cpu")
    class Mixed(torch.nn.Module):  # an fp32 and a bf16 parameter, small enough for one 25 MB bucket
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.ones(5))
            self.b = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
        def forward(self, x):
            return (self.a * x).sum() + (self.b.float() * x[:3]).sum()
    ddp = BucketedDDP(Mixed(), bucket_cap_mb=25)
    x = torch.arange(5, dtype=torch.float32) * (env.rank + 1)   # rank r's gradient: (r + 1) * [0, 1, 2, ...]
    for _ in range(2):  # the second step reuses the buckets
        ddp.module.zero_grad(set_to_none=True)
        ddp(x).backward()
        ddp.finish_gradient_synchronization()
    out = {n: [str(p.grad.dtype), p.grad.float().tolist()] for n, p in ddp.module.named_parameters()}
    out["buckets"] = [str(b.flat.dtype) for b in ddp.buckets]
    open(sys.argv[1] + str(env.rank), "w").write(json.dumps(out))
    cdist.teardown()
''')


@pytest.mark.timeout(120)
def test_bucketed_ddp_buckets_fp32_and_bf16_parameters_apart(tmp_path):
    script = tmp_path / "mixed.py"
    script.write_text(MIXED)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(script), str(tmp_path / "rank")], timeout=100, capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "COURSE_DEVICE": "cpu", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}").read_text())
        mean = [1.5 * i for i in range(5)]  # ((1 + 2) / 2) * [0, 1, 2, 3, 4]
        assert got["a"] == ["torch.float32", mean]
        assert got["b"] == ["torch.bfloat16", mean[:3]]
        assert sorted(got["buckets"]) == ["torch.bfloat16", "torch.float32"]
