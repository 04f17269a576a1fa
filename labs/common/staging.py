"""Collectives of GPU tensors staged through host memory: a TEACHING FALLBACK for ranks that share one GPU.

NCCL refuses two ranks of a group on one device, so on a one-GPU machine the course's ranks talk over gloo
(COURSE_BACKEND=gloo). gloo moves all-reduce and broadcast of CUDA tensors itself, but its send/recv,
reduce-scatter and single-tensor all-gather read a GPU pointer as if it were host memory: on an H200 (torch 2.11)
a pipeline's first send failed ("writev ... Bad address") and DeepSpeed's ZeRO hung. So, for every other
collective, this layer copies each GPU tensor argument into a host buffer, runs the collective on the host
buffers, and copies the results back into the GPU tensors. The same code then runs on one GPU as on two, and its
answers (losses, gradients, bytes held) are the same; its speed is not:

  - two copies per call over PCIe, each one a synchronisation of the host with the GPU: S bytes in, S out
    (ZeRO-2's step: a reduce-scatter of 4Ψ bytes in and 4Ψ/N out, an all-gather of 4Ψ/N in and 4Ψ out);
  - no overlap: a collective finishes before its call returns, async_op=True included, so a reduce-scatter
    launched from a backward hook runs before the rest of backward instead of beside it. Only point-to-point sends and
    receives stay asynchronous (a send waits for its peer's receive: holding it would deadlock a pipeline); a
    receive's data reaches the GPU tensor at wait().
STATS counts the calls, bytes and host seconds; the checker shows them under each run (info rows), and says NOT
RUN for the speed checks that compare staged collectives with gloo's own all-reduce.

What it covers: torch.distributed's functions as Python calls them by name: the labs' code, FSDP2, DeepSpeed (its
engine takes them when it is built, after dist.init), torch.distributed.pipelining (isend/irecv inside P2POp,
which checks them by identity: they are replaced in distributed_c10d too). What it cannot cover: collectives
torch issues from C++ (DDP's reducer, DTensor's functional collectives): on gloo those are all-reduces (DDP; lab
6's DTensor tensor parallelism), which gloo moves itself.

`wanted` says when: gloo with a GPU, or COURSE_HOST_STAGING=1 (every tensor staged, on any device: the fallback
and its cost, seen on a laptop). labs/common/dist.init installs it; nothing else does. Torch-free until install.
"""
from __future__ import annotations

import functools
import inspect
import os
import time
import weakref

# gloo moves these itself for GPU tensors: never staged
NATIVE = ("all_reduce", "broadcast")
# collective -> (parameters it reads, parameters it writes); a tensor or a list of tensors each
OPS = {
    "send": (("tensor",), ()), "isend": (("tensor",), ()),
    "recv": ((), ("tensor",)), "irecv": ((), ("tensor",)),
    "reduce_scatter_single": (("input",), ("output",)), "reduce_scatter_tensor": (("input",), ("output",)),
    "all_gather_single": (("input_tensor",), ("output_tensor",)),
    "all_gather_into_tensor": (("input_tensor",), ("output_tensor",)),
    "reduce_scatter": (("input_list",), ("output",)), "all_gather": (("tensor",), ("tensor_list",)),
    "all_to_all_single": (("input",), ("output",)),
    "all_to_all": (("input_tensor_list",), ("output_tensor_list",)),
    "gather": (("tensor",), ("gather_list",)), "scatter": (("scatter_list",), ("tensor",)),
    "reduce": (("tensor",), ("tensor",)),
}
P2P_ASYNC = ("isend", "irecv")  # stay asynchronous; P2POp accepts only distributed_c10d's own isend/irecv
ENV = "COURSE_HOST_STAGING"

STATS = {"calls": 0, "bytes_to_host": 0, "bytes_to_device": 0, "copy_s": 0.0, "call_s": 0.0}


def wanted(environ, device_type: str, backend: str) -> bool:
    """Stage here? gloo on a GPU (it cannot move most collectives of GPU memory), or COURSE_HOST_STAGING=1."""
    return environ.get(ENV) == "1" or (backend == "gloo" and device_type != "cpu")


def why(environ=os.environ) -> str:
    """What the checker says on a speed check it does not run under staging."""
    how = "COURSE_HOST_STAGING=1" if environ.get(ENV) == "1" else "two ranks on one GPU over gloo"
    return (f"collectives are staged through host memory here ({how}: labs/common/staging.py, a teaching "
            "fallback that copies every tensor to the host and back and gives up overlap): a speed ratio against "
            "DDP, whose all-reduce gloo moves itself, would time the copies, not your code")


class _Staging:
    def __init__(self, every_tensor: bool):
        import torch
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self.torch, self.dist, self.c10d = torch, dist, c10d
        self.every_tensor = every_tensor
        # what this layer handed to gloo, by id (a WeakSet would compare tensors with ==): tests' fake gloo reads it
        self.host_buffers = weakref.WeakValueDictionary()
        self.orig: dict = {}
        work_base = dist.distributed_c10d.Work

        class StagedWork(work_base):
            """A collective's handle: a subclass of torch's Work (FSDP2 waits only on those). wait() waits for
            the host collective, then copies what it received into the GPU tensors."""

            def __init__(self, inner=None, finish=None):
                super().__init__()
                self._inner, self._finish, self._done = inner, finish, inner is None and finish is None

            def wait(self, timeout=None):
                if not self._done:
                    if self._inner is not None:
                        self._inner.wait()
                    if self._finish is not None:
                        self._finish()
                    self._done = True
                return True

            def is_completed(self):
                return self._done

            def get_future(self):
                fut = torch.futures.Future()
                self.wait()
                fut.set_result(None)
                return fut

        self.Work = StagedWork

    def is_host_buffer(self, t) -> bool:
        return self.host_buffers.get(id(t)) is t

    def on_device(self, t) -> bool:
        """To be staged? Not a buffer this layer made: torch's send calls isend (2.13), and that call gets one."""
        return (isinstance(t, self.torch.Tensor) and (self.every_tensor or t.device.type != "cpu")
                and not self.is_host_buffer(t))

    def _to_host(self, value, read: bool):
        """A host buffer for a tensor (its contents copied when the collective reads it), or a list of them."""
        if isinstance(value, (list, tuple)):
            return [self._to_host(v, read) for v in value]
        if not self.on_device(value):
            return value
        t0 = time.perf_counter()
        buf = self.torch.empty(value.shape, dtype=value.dtype, device="cpu")  # contiguous, as gloo needs
        if read:  # waits for the kernels that produce the tensor: a copy to the host synchronises with its stream
            buf.copy_(value.detach())
            STATS["bytes_to_host"] += buf.numel() * buf.element_size()
        STATS["copy_s"] += time.perf_counter() - t0
        self.host_buffers[id(buf)] = buf
        return buf

    def _to_device(self, dev, host) -> None:
        if isinstance(dev, (list, tuple)):
            for d, h in zip(dev, host):
                self._to_device(d, h)
            return
        if dev is host:
            return
        t0 = time.perf_counter()
        with self.torch.no_grad():
            dev.copy_(host)
        STATS["bytes_to_device"] += host.numel() * host.element_size()
        STATS["copy_s"] += time.perf_counter() - t0

    def wrap(self, name, orig):
        sig = inspect.signature(orig)
        reads, writes = OPS[name]
        if not set(reads + writes) <= set(sig.parameters):
            return None  # another signature than the one this layer knows: leave the function alone
        staging = self

        @functools.wraps(orig)
        def staged(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            touched = [n for n in dict.fromkeys(reads + writes) if bound.arguments.get(n) is not None]
            if not any(staging.on_device(t) for n in touched for t in _leaves(bound.arguments[n])):
                return orig(*args, **kwargs)
            t0 = time.perf_counter()
            STATS["calls"] += 1
            device_args = {n: bound.arguments[n] for n in touched}
            for n in touched:
                bound.arguments[n] = staging._to_host(device_args[n], read=n in reads)

            def copy_back():
                for n in writes:
                    if n in device_args:
                        staging._to_device(device_args[n], bound.arguments[n])

            asked_async = bool(bound.arguments.get("async_op"))
            if asked_async:  # finished here: the copy back cannot wait for a wait() that FSDP2 may never call
                bound.arguments["async_op"] = False
            out = orig(*bound.args, **bound.kwargs)
            if name in P2P_ASYNC:  # the receive's data arrives at wait()
                STATS["call_s"] += time.perf_counter() - t0
                return staging.Work(out, copy_back)
            copy_back()
            STATS["call_s"] += time.perf_counter() - t0
            return staging.Work() if asked_async else out
        staged.__wrapped__ = orig
        return staged

    def install(self) -> list[str]:
        for name in OPS:
            orig = getattr(self.dist, name, None)
            if orig is None or name in self.orig:
                continue
            wrapped = self.wrap(name, orig)
            if wrapped is None:
                continue
            self.orig[name] = orig
            setattr(self.dist, name, wrapped)
            if getattr(self.c10d, name, None) is orig and name in P2P_ASYNC:  # P2POp's identity check
                setattr(self.c10d, name, wrapped)
        return sorted(self.orig)

    def uninstall(self) -> None:
        for name, orig in self.orig.items():
            for mod in (self.dist, self.c10d):
                if getattr(getattr(mod, name, None), "__wrapped__", None) is orig:
                    setattr(mod, name, orig)
        self.orig = {}


def _leaves(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


ACTIVE: _Staging | None = None


def install(every_tensor: bool = False) -> _Staging:
    """Stage the collectives listed in OPS from now on, in this process (idempotent); returns the layer."""
    global ACTIVE
    if ACTIVE is None:
        ACTIVE = _Staging(every_tensor)
        ACTIVE.install()
    return ACTIVE


def uninstall() -> None:
    global ACTIVE
    if ACTIVE is not None:
        ACTIVE.uninstall()
        ACTIVE = None


def summary(stats: dict) -> str:
    """One line for the checker's info rows: what the fallback cost in this run."""
    return (f"{stats['calls']} collectives staged through host memory (teaching fallback): "
            f"{stats['bytes_to_host'] / 1e6:.2f} MB to host, {stats['bytes_to_device'] / 1e6:.2f} MB back, "
            f"{stats['copy_s']:.2f} s copying, {stats['call_s']:.2f} s in the staged calls")
