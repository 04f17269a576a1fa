# GENERATED from solutions/lab3_sharding/__init__.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""Lab 3: sharding. The functions the checker calls (the seam) are exported here; their contracts
are in each docstring and in this lab's README."""
from .dcp_state import TrainState, load_sharded, save_sharded
from .deepspeed_zero import ds_config, make_engine
from .fsdp import apply_fsdp, model_state_bytes
from .memory_model import bytes_per_rank
from .zero1 import ShardedOptimizer, partition
from .zero2 import Zero2Optimizer

__all__ = ["bytes_per_rank", "partition", "ShardedOptimizer", "Zero2Optimizer", "apply_fsdp", "model_state_bytes",
           "TrainState", "save_sharded", "load_sharded", "ds_config", "make_engine"]
