"""The same with PyTorch's own data-parallel wrapper: its C++ reducer does what bucketed.py does."""
from __future__ import annotations

import torch.nn as nn


def make_torch_ddp(module: nn.Module, device, bucket_cap_mb: float = 25.0) -> nn.Module:
    """Wrap `module` (already on `device`) in torch DDP with buckets of bucket_cap_mb."""
    # BEGIN SOLUTION Return module wrapped so that, like your bucketed wrapper, every rank starts from rank 0's weights
    #                and each gradient is averaged over ranks during backward, in buckets of about bucket_cap_mb MB; the
    #                wrapper is bound to this rank's one GPU, or to no device on CPU. Forward and the no-sync block
    #                behave as your wrapper's do. The checker reads the bucket cap and the devices of what you return.
    # HINT 1         PyTorch's C++ reducer does what your bucketed wrapper does. What must it be told: which device this
    #                replica lives on, and how big a bucket is?
    # HINT 2         torch.nn.parallel.DistributedDataParallel; its device_ids is [the GPU index] on CUDA and None on
    #                CPU: cdist.ddp_device_ids(device) (labs/common/dist.py) returns the right one.
    # HINT 3         from torch.nn.parallel import DistributedDataParallel; from labs.common import dist as cdist;
    #                return DistributedDataParallel(module, device_ids=cdist.ddp_device_ids(device),
    #                bucket_cap_mb=bucket_cap_mb).
    from torch.nn.parallel import DistributedDataParallel

    from labs.common import dist as cdist

    return DistributedDataParallel(module, device_ids=cdist.ddp_device_ids(device), bucket_cap_mb=bucket_cap_mb)
    # END SOLUTION
