# GENERATED from solutions/lab8_multinode/goodput.py by `make starters` (checker/starters.py).
# This is your copy: fill in the TODOs. Edits to the course belong in solutions/.
"""How often to checkpoint, and how much of the cluster's time then trains: Young-Daly and goodput.

A job that fails on average every MTBF seconds (failures independent of each other: exponential gaps) and
saves every tau seconds of training pays three costs:
  - the save stall C, once per period of tau + C seconds;
  - per failure, the work since the last COMPLETE checkpoint, which the restart redoes: a failure lands
    anywhere in a period, so on average half of one;
  - per failure, the restart R: a replacement found, processes started, the checkpoint loaded.
Saving more often pays more stalls; less often, more work lost per failure. The interval that balances the
two is Young's (1974), refined by Daly (2006). To check yours: C = 30 s and MTBF = 1 day (86,400 s) give a
save every 38 min (2,277 s), and at the optimum the stalls and the lost work each take 1.3% of the time.

An async save (async_ckpt.py) stops training only for its copy to CPU memory: C is that stall, the part of
the save that training waits for, not the seconds the write takes. A cheaper save moves the optimum to more
frequent saves, and the waste falls with the square root of C.
"""
from __future__ import annotations

import math


def checkpoint_interval(save_s: float, mtbf_s: float) -> float:
    """Seconds of training between two checkpoints that waste the least of the cluster's time, for a save that
    stalls training save_s seconds and a mean time between failures of mtbf_s seconds."""
    raise NotImplementedError("TODO(lab8): The training seconds between two saves that minimise the waste per second, "
                              "to first order: the save stalls (save_s per period) against the work a failure throws "
                              "away (one every mtbf_s seconds on average, landing anywhere in a period: all since the "
                              "last complete save is redone). save_s is what training waits for (an async save: its "
                              "copy only). One cost falls as the interval grows, the other rises: the optimum balances "
                              "them. C = 30 s, MTBF = 1 day: 2,277 s. (hints: checker hint lab8 "
                              "goodput.checkpoint_interval)")


def predict_goodput(step_s: float, save_s: float, restart_s: float, mtbf_s: float, interval_steps: int) -> float:
    """The expected share of wall time spent on training steps that are kept (first order in 1 / MTBF), for a job
    whose step takes step_s, that saves every interval_steps steps with a stall of save_s, restarts in restart_s
    after a failure, and fails on average every mtbf_s seconds."""
    raise NotImplementedError("TODO(lab8): Useful step time / wall time, between 0 and 1: a period is interval_steps "
                              "steps and one save stall; of a period only the steps are useful; every mtbf_s seconds "
                              "of wall time (on average) a failure costs the restart plus the work since the last "
                              "complete checkpoint (a failure is equally likely anywhere in a period), each to first "
                              "order (small next to mtbf_s). Never below 0. (hints: checker hint lab8 "
                              "goodput.predict_goodput)")

