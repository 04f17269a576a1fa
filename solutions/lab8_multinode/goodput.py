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
    # BEGIN SOLUTION The training seconds between two saves that minimise the waste per second, to first order: the
    #                save stalls (save_s per period) against the work a failure throws away (one every mtbf_s seconds
    #                on average, landing anywhere in a period: all since the last complete save is redone). save_s is
    #                what training waits for (an async save: its copy only). One cost falls as the interval grows,
    #                the other rises: the optimum balances them. C = 30 s, MTBF = 1 day: 2,277 s.
    # HINT 1         Write the waste per second of wall time as a function of the interval tau: one term for the
    #                saves (how many per second, each how long?), one for the failures (how many per second, each
    #                losing how much work on average, if a failure is equally likely anywhere in a period?). Then
    #                minimise it.
    # HINT 2         W(tau) = C / tau + (tau / 2) / MTBF (the restart adds a constant, which moves no optimum); set
    #                its derivative in tau to zero.
    # HINT 3         return math.sqrt(2 * save_s * mtbf_s)  (Young-Daly).
    # The waste per second of wall time, to first order (each cost small next to the MTBF):
    #     W(tau) = C / tau + (tau / 2 + R) / MTBF      (a stall per period; a failure per MTBF, losing R + tau/2)
    #     dW/dtau = -C / tau^2 + 1 / (2 MTBF) = 0   ->   tau = sqrt(2 C MTBF)
    # where the two shares are equal, sqrt(C / (2 MTBF)) each: C = 30 s, MTBF = 86,400 s -> 2,277 s, 1.3% each.
    return math.sqrt(2 * save_s * mtbf_s)
    # END SOLUTION


def predict_goodput(step_s: float, save_s: float, restart_s: float, mtbf_s: float, interval_steps: int) -> float:
    """The expected share of wall time spent on training steps that are kept (first order in 1 / MTBF), for a job
    whose step takes step_s, that saves every interval_steps steps with a stall of save_s, restarts in restart_s
    after a failure, and fails on average every mtbf_s seconds."""
    # BEGIN SOLUTION Useful step time / wall time, between 0 and 1: a period is interval_steps steps and one save
    #                stall; of a period only the steps are useful; every mtbf_s seconds of wall time (on average) a
    #                failure costs the restart plus the work since the last complete checkpoint (a failure is equally
    #                likely anywhere in a period), each to first order (small next to mtbf_s). Never below 0.
    # HINT 1         Two factors: of an undisturbed period, what share is steps? Of the wall time, what share is
    #                not spent redoing lost work or restarting, given one failure per MTBF on average? How much of
    #                a period does a failure throw away on average?
    # HINT 2         tau = interval_steps * step_s; a period is tau + C; each failure costs R + (tau + C) / 2.
    # HINT 3         tau = interval_steps * step_s; period = tau + save_s; return tau / period * max(0.0, 1 -
    #                (restart_s + period / 2) / mtbf_s).
    # A period trains tau and stalls C: tau / (tau + C) of undisturbed time is steps. Failures come once per MTBF of
    # wall time and each wastes R + (tau + C) / 2 (the restart, and on average half a period redone), so a share
    # 1 - (R + (tau + C) / 2) / MTBF of the wall time is left to periods. Their product, to first order; Daly's
    # exact expectation for exponential failures, tau / (MTBF e^(R/MTBF) (e^((tau + C)/MTBF) - 1)), differs by
    # the square of these shares (0.06 at the chaos check's 2.5 s MTBF, 0.0001 at a cluster's day).
    tau = interval_steps * step_s
    period = tau + save_s  # one save stall per interval_steps steps
    per_failure = restart_s + period / 2  # the restart, and on average half a period of work redone
    return tau / period * max(0.0, 1 - per_failure / mtbf_s)
    # END SOLUTION

