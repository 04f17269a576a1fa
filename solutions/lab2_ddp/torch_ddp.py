"""The same with PyTorch's DistributedDataParallel: the C++ reducer does what bucketed.py does."""
from __future__ import annotations

import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from labs.common import dist as cdist


def make_torch_ddp(module: nn.Module, device, bucket_cap_mb: float = 25.0) -> nn.Module:
    """Wrap `module` (already on `device`) in torch DDP with buckets of bucket_cap_mb."""
    # BEGIN SOLUTION DistributedDataParallel(module, device_ids=cdist.ddp_device_ids(device),
    #                bucket_cap_mb=bucket_cap_mb)
    return DistributedDataParallel(module, device_ids=cdist.ddp_device_ids(device), bucket_cap_mb=bucket_cap_mb)
    # END SOLUTION
