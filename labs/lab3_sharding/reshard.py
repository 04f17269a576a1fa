# GENERATED from solutions/lab3_sharding/reshard.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Load a DCP checkpoint at any world size and show it is the same model.

    torchrun --nproc_per_node 3 -m labs.lab3_sharding.reshard --ckpt runs/lab3/ckpt-fsdp

The checkpoint was written by some number of ranks; here N ranks each read just the slices their
own FSDP2 shards need. Prints the step, the validation loss of the loaded model and a digest of
its full weights: the same at every N.
"""
from __future__ import annotations

import argparse
import hashlib
import json

import torch

from labs.common import dist as cdist
from labs.common.data import BatchSampler, TokenFile, ensure_corpus
from labs.common.model import build_model
from labs.common.optim import make_optimizer, make_scheduler

from .dcp_state import load_sharded
from .fsdp import apply_fsdp


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True)
    args = ap.parse_args(argv)
    env = cdist.init()
    torch.manual_seed(123)  # a different init: what we see afterwards must come from the checkpoint
    model = apply_fsdp(build_model("tiny").to(env.device))
    opt = make_optimizer(model)
    step = load_sharded(args.ckpt, model, opt, make_scheduler(opt, 2, 100), BatchSampler(10, 1))
    val = TokenFile.open(ensure_corpus(256), "val")
    model.eval()
    with torch.no_grad():
        loss = model(*val.batch(range(16), 64, env.device))[1].item()
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    h = hashlib.sha256(b"".join(full[k].cpu().numpy().tobytes() for k in sorted(full))).hexdigest()[:12]
    if env.is_main:
        print(json.dumps({"world_size": env.world_size, "step": step, "val_loss": loss, "weights_digest": h}))
    cdist.teardown()


if __name__ == "__main__":
    main()
