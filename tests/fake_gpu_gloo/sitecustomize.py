"""A FAKE of gloo on a GPU, for tests/test_staging.py: with this folder on PYTHONPATH, every Python process (the
checker, its run server, each rank) starts with torch.distributed refusing, as gloo does for CUDA tensors, every
collective but all-reduce and broadcast whose tensors are not host buffers handed over by the course's staging
layer (labs/common/staging.py). On the CPU every tensor is host memory, so the fake treats every tensor as device
memory unless staging made it; COURSE_HOST_STAGING=1 makes the course stage every tensor, as it stages every CUDA
tensor on one GPU over gloo. Without staging, a refused call raises the error an H200 showed (torch 2.11).

What it cannot show: the copies' real cost over PCIe, CUDA streams, and collectives torch issues from C++ (DDP's
reducer, DTensor's functional collectives): those never reach this Python layer, here as on a GPU."""
import functools

import torch
import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d

_REFUSED = ("send", "recv", "isend", "irecv", "reduce_scatter_single", "reduce_scatter_tensor", "all_gather_single",
            "all_gather_into_tensor", "reduce_scatter", "all_gather", "all_to_all_single", "all_to_all", "gather",
            "scatter", "reduce")


def _staged(t) -> bool:
    import sys

    staging = sys.modules.get("labs.common.staging")
    return staging is not None and staging.ACTIVE is not None and staging.ACTIVE.is_host_buffer(t)


def _tensors(args, kwargs):
    for v in (*args, *kwargs.values()):
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor):
                yield t


def _refuse(name, orig):
    @functools.wraps(orig)
    def fake(*args, **kwargs):
        if not all(_staged(t) for t in _tensors(args, kwargs)):
            raise RuntimeError(f"[fake gloo on a GPU] {name}: [gloo/transport/tcp/pair.cc] writev: Bad address "
                               "(gloo read a GPU tensor as host memory)")
        return orig(*args, **kwargs)
    fake.__wrapped__ = orig
    return fake


for _name in _REFUSED:
    _orig = getattr(_dist, _name, None)
    if _orig is None:
        continue
    _fake = _refuse(_name, _orig)
    setattr(_dist, _name, _fake)
    if _name in ("isend", "irecv") and getattr(_c10d, _name, None) is _orig:  # P2POp checks them by identity
        setattr(_c10d, _name, _fake)
