"""Lab 1's runs: their shape (model, batch, seeds, the input pipeline's and the meter's tests) and the set-up every
lab 1 task starts from. Both sides read the shape; the set-up runs in the worker (tasks.py and measure.py)."""
from __future__ import annotations

CONFIG, BATCH, SEQ = "tiny", 16, 64
SEED, DATA_SEED = 1234, 0
N_STEPS, SAVE_AT = 100, 40  # 100 tiny steps ~ 2.5 s on one core
# The uninterrupted training run's losses against the reference's own run of it (checker/labs/_crosscheck.py): the
# reference is bit-identical to itself; the slack is for a correct step that sums in another order (its own clip,
# its own loss), ~1e-7 a step; a step that trains otherwise outside the compared runs is off by > 1e-2 within steps.
TRAIN_LOSS_RTOL = 1e-3
TRAIN_WHY = ("The reference's run from the same seed, data and steps: does your step draw other random numbers (a "
             "second forward), seed or update otherwise, or behave otherwise outside the differential and timed runs?")
# Input pipeline: a batch's transform is made to cost COST_RATIO of this machine's measured step, so a
# pipeline in the training process waits 0.5 / (1 + 0.5) = 33% of each step, on a laptop or an H200 alike.
COST_RATIO = 0.5
PIPE_WARMUP, PIPE_STEPS, PIPE_BASELINE = 4, 20, 10
METER_LOAD_MATMULS = 2  # per metered step, on a GPU only (_device_load)
# The meter's test: warm-up steps of other lengths and token counts than the window's (and a window whose
# steps differ too), so a meter that counts a warm-up step's tokens or opens its window one step early or
# late is off by 10-40%, far over METER_TOL. (tokens passed to step(), seconds of extra wait after the step)
METER_WARMUP = 3
METER_STEPS = [(6000, 0.08), (200, 0.0), (9000, 0.04)] + [(4000, 0.02), (500, 0.0), (4000, 0.02), (1500, 0.0)] * 2

# The speed ratio: SPEED_WINDOWS windows of SPEED_STEPS steps each side (~0.2 s a window on tiny), the learner's
# and the reference's taken in turn A B B A ... (each pair back to back, so a change of load hits both alike).
SPEED_WINDOWS, SPEED_STEPS, SPEED_WARMUP = 6, 8, 2


def speed_order(learner: str, reference: str) -> list[str]:
    return [w for k in range(SPEED_WINDOWS) for w in ((learner, reference) if k % 2 == 0 else (reference, learner))]


def _setup(seed_fn, seed: int, data_seed: int = DATA_SEED):
    from labs.common import dist as cdist
    from labs.common.data import BatchSampler, TokenFile, ensure_corpus
    from labs.common.model import build_model
    from labs.common.optim import make_optimizer, make_scheduler

    env = cdist.init()
    seed_fn(seed)
    data = TokenFile.open(ensure_corpus(256))
    model = build_model(CONFIG).to(env.device)
    opt = make_optimizer(model)
    sched = make_scheduler(opt, warmup=10, total=N_STEPS)
    sampler = BatchSampler(data.num_windows(SEQ), BATCH, seed=data_seed)
    return env, data, model, opt, sched, sampler


def _step_in(env, fn):
    """fn wrapped in the graded precision (`checker grade --precision`): bf16 autocast, or nothing for fp32."""
    from labs.common import precision

    def step(*args):
        with precision.autocast(env.device, precision.current()):
            return fn(*args)
    return step
