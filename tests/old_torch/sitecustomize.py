"""An EMULATION of a torch older than 2.13 (the oldest supported end is 2.10) on top of the torch installed here,
for tests/test_compat.py: no older wheel is installed in CI. With this folder on PYTHONPATH every Python process
(the checker, its run server, each rank) starts with torch.distributed as 2.10-2.12 spell it: the names 2.13 added
(`reduce_scatter_single`, `all_gather_single`) are gone, and the old ones (`reduce_scatter_tensor`,
`all_gather_into_tensor`) are plain functions again, not deprecated aliases of the new.

Only the public namespace changes: torch's own modules are 2.13's and import 2.13's names from
torch.distributed.distributed_c10d, where they stay. FSDP2 here calls `dist.all_gather_single`, which a real 2.12
spells the old way; the course's alias (labs/common/compat.py) serves both. What no emulation shows: behaviour that
changed between releases without a name changing."""
import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d

_NEW = {"reduce_scatter_single": "reduce_scatter_tensor", "all_gather_single": "all_gather_into_tensor"}
_impl = {new: getattr(_c10d, new) for new in _NEW}


def reduce_scatter_tensor(output, input, op=_dist.ReduceOp.SUM, group=None, async_op=False):
    return _impl["reduce_scatter_single"](output, input, op, group, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    return _impl["all_gather_single"](output_tensor, input_tensor, group, async_op)


for _new in _NEW:
    delattr(_dist, _new)
_dist.reduce_scatter_tensor, _dist.all_gather_into_tensor = reduce_scatter_tensor, all_gather_into_tensor
