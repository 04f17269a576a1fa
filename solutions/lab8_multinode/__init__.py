"""Lab 8 (advanced): multi-node training. The functions the checker calls (the seam) are exported here;
their contracts are in each docstring and in this lab's README."""
from .async_ckpt import AsyncCheckpointer, blocking_save
from .elastic import latest, resume, save_checkpoint
from .goodput import checkpoint_interval, predict_goodput
from .hsdp import make_mesh, shard_model
from .launch import check_layout, pick_interface, torchrun_args

__all__ = ["torchrun_args", "pick_interface", "check_layout", "make_mesh", "shard_model", "save_checkpoint",
           "resume", "latest", "AsyncCheckpointer", "blocking_save", "checkpoint_interval",
           "predict_goodput"]
