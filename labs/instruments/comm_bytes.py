"""Bytes each rank sends, counted from the collectives it issues (the ring algorithms' volumes).

    comm = CommBytes()       # wraps torch.distributed's collectives; install before code that imports them by name
    comm.start()
    ... one training step ...
    records = comm.stop()    # [(op, buffer bytes, bytes this rank sends)]; sent(records) sums the last column

Per rank, N ranks, S = the bytes of the whole buffer (what NCCL's tests call busbw's volume):
    all_reduce        2S(N−1)/N   a reduce-scatter then an all-gather
    reduce_scatter     S(N−1)/N   S = the input, all N slices
    all_gather         S(N−1)/N   S = the output
    broadcast          S(N−1)/N   averaged over ranks: in a pipelined ring the root sends S, the last rank nothing
    all_to_all         S(N−1)/N   S = the input; the slice for itself stays home (with input_split_sizes:
                                  S minus the rows of its own split, exactly: expert parallelism's splits are uneven)
    send / isend       S
So DDP's step (all-reduce of 4Ψ gradient bytes) sends 8Ψ(N−1)/N per rank; ZeRO-2's reduce-scatter +
all-gather the same; FSDP's two all-gathers + one reduce-scatter 12Ψ(N−1)/N. The figure is the
algorithm's, not the wire's: gloo may pick another algorithm, NCCL a tree; the sum over collectives
is what a design costs, independent of the backend.

torch's own modules call these by module attribute (FSDP2: dist.all_gather_single,
dist.reduce_scatter_single), so they are counted too; torch DDP's C++ reducer is not. Sends batched with
dist.batch_isend_irecv([dist.P2POp(dist.isend, ...), ...]) count as the isends they are: the wrapper also
replaces torch.distributed.distributed_c10d's own isend, which P2POp checks its op against and
batch_isend_irecv calls.
"""
from __future__ import annotations

import inspect
import threading

from labs.common.compat import RENAMED

# op name -> (index of the tensor argument that sets S, factor of S(N−1)/N)
OPS = {
    "all_reduce": (0, 2), "broadcast": (0, 1), "reduce_scatter_single": (1, 1), "all_gather_single": (0, 1),
    "all_to_all_single": (1, 1), "send": (0, None), "isend": (0, None),
}
# torch's own modules call the spelling of their release (compat.RENAMED: 2.13 renamed two): count both
OPS.update({old: OPS[new] for new, old in RENAMED.items()})
LISTS = {"all_gather": 0, "reduce_scatter": 1}  # ops whose S is a list of N tensors
P2P = ("send", "isend")


def _nbytes(t) -> int:
    if isinstance(t, (list, tuple)):
        return sum(_nbytes(x) for x in t)
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def sent(records) -> float:
    return sum(r[2] for r in records)


class CommBytes:
    def __init__(self):
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self._dist, self._orig, self._params, self._local = dist, {}, {}, threading.local()
        self._c10d, self._c10d_orig = c10d, {}
        self.records: list | None = None
        self.observer = None  # observer(op, what it returned) after each outermost call: a checker's handle log
        for name in [*OPS, *LISTS]:
            orig = getattr(dist, name, None)
            if orig is not None:
                self._orig[name] = orig
                self._params[name] = list(inspect.signature(orig).parameters)
                wrapped = self._wrap(name, orig)
                setattr(dist, name, wrapped)
                if name in P2P and getattr(c10d, name, None) is orig:  # P2POp accepts only c10d's own isend
                    self._c10d_orig[name] = orig
                    setattr(c10d, name, wrapped)

    def _wrap(self, name, orig):
        def counted(*args, **kwargs):
            depth = getattr(self._local, "depth", 0)
            if self.records is not None and depth == 0:  # outermost call only: no double counting
                self.records.append(self._count(name, args, kwargs))
            self._local.depth = depth + 1
            try:
                result = orig(*args, **kwargs)
            finally:
                self._local.depth = depth
            if self.observer is not None and depth == 0:
                self.observer(name, result)
            return result
        counted.__wrapped__ = orig
        return counted

    def _count(self, name, args, kwargs):
        n = self._dist.get_world_size(kwargs.get("group"))
        index, factor = (LISTS[name], 1) if name in LISTS else OPS[name]
        arg = args[index] if len(args) > index else kwargs[self._params[name][index]]
        size = _nbytes(arg)
        if name == "all_to_all_single":
            splits = args[3] if len(args) > 3 else kwargs.get("input_split_sizes")
            if splits:  # uneven: what leaves is everything but this rank's own rows
                rows = arg.shape[0] if arg.dim() else 1
                own = splits[self._dist.get_rank(kwargs.get("group", args[4] if len(args) > 4 else None))]
                return name, size, size - (size // rows * own if rows else 0)
        return name, size, size if factor is None else factor * size * (n - 1) / n

    def start(self) -> None:
        self.records = []

    def stop(self) -> list:
        records, self.records = self.records or [], None
        return records

    def uninstall(self) -> None:
        for name, orig in self._orig.items():
            if getattr(getattr(self._dist, name), "__wrapped__", None) is orig:
                setattr(self._dist, name, orig)
        for name, orig in self._c10d_orig.items():
            if getattr(getattr(self._c10d, name), "__wrapped__", None) is orig:
                setattr(self._c10d, name, orig)
