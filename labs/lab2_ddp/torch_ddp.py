# GENERATED from solutions/lab2_ddp/torch_ddp.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""The same with PyTorch's own data-parallel wrapper: its C++ reducer does what bucketed.py does."""
from __future__ import annotations

import torch.nn as nn


def make_torch_ddp(module: nn.Module, device, bucket_cap_mb: float = 25.0) -> nn.Module:
    """Wrap `module` (already on `device`) in torch DDP with buckets of bucket_cap_mb."""
    raise NotImplementedError("TODO(lab2): Return module wrapped so that, like your bucketed wrapper, every rank "
                              "starts from rank 0's weights and each gradient is averaged over ranks during backward, "
                              "in buckets of about bucket_cap_mb MB; the wrapper is bound to this rank's one GPU, or "
                              "to no device on CPU. Forward and the no-sync block behave as your wrapper's do. The "
                              "checker reads the bucket cap and the devices of what you return. (hints: checker hint "
                              "lab2 torch_ddp.make_torch_ddp)")
