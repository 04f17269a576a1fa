"""Lab 1: a single-device baseline. The functions the checker calls (the seam) are exported here;
their contracts are in each function's docstring and in this lab's README."""
from .meters import ThroughputMeter, model_state_bytes
from .pipeline import make_loader
from .seeding import seed_everything
from .state import load_checkpoint, save_checkpoint
from .step import train_step

__all__ = ["seed_everything", "train_step", "ThroughputMeter", "model_state_bytes",
           "save_checkpoint", "load_checkpoint", "make_loader"]
