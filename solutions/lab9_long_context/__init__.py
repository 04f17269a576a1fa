"""Lab 9 (advanced): long context. The functions the checker calls (the seam) are exported here; their contracts
are in each docstring and in this lab's README."""
from .cp_checkpoint import load_cp_checkpoint, save_cp_checkpoint
from .cp_step import apply_context_parallel, cp_dp_step
from .flash import flash_attention, merge
from .ring import ring_attention
from .ulysses import ulysses_attention
from .zigzag import zigzag_shard

__all__ = ["flash_attention", "merge", "ring_attention", "ulysses_attention", "zigzag_shard", "apply_context_parallel",
           "cp_dp_step", "save_cp_checkpoint", "load_cp_checkpoint"]
