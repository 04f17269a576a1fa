import json

from labs.common.metrics import StepLog, mfu, peak_flops, read_log
from labs.common.model import get_config


def test_step_log_appends_and_reader_keeps_the_last_record_per_step(tmp_path):
    path = tmp_path / "log.jsonl"
    log = StepLog(path)
    log.write(step=1, loss=3.0)
    log.write(step=2, loss=2.5)
    log.close()
    log = StepLog(path)  # a resumed run re-logs step 2
    log.write(step=2, loss=2.4)
    log.close()
    assert len(path.read_text().splitlines()) == 3
    assert [(r["step"], r["loss"]) for r in read_log(path)] == [(1, 3.0), (2, 2.4)]
    assert all("time" in json.loads(line) for line in path.read_text().splitlines())


def test_peak_table_and_mfu():
    assert peak_flops("NVIDIA H200", "bf16") == 989.4e12
    cfg = get_config("tiny")
    assert mfu(1000.0, cfg, 64, None) is None
    assert abs(mfu(1e6, cfg, 64, 1e12) - 1e6 * (6 * 115840 + 12 * 2 * 64 * 64) / 1e12) < 1e-12


def test_cpu_peak_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("COURSE_PEAK_FLOPS", "2.5e10")
    assert peak_flops("cpu (1 threads)") == 2.5e10
    monkeypatch.delenv("COURSE_PEAK_FLOPS")
    assert peak_flops("cpu (1 threads)") is None


def test_cpu_mfu_denominator_is_a_matmul_measured_here_once(monkeypatch):
    import torch

    from labs.common.metrics import device_peak_flops, measured_cpu_peak
    monkeypatch.delenv("COURSE_PEAK_FLOPS", raising=False)
    state = torch.get_rng_state()
    peak = device_peak_flops(torch.device("cpu"), "cpu (1 threads)")
    assert peak == measured_cpu_peak() > 1e8  # cached: the same number, not a second measurement
    assert torch.equal(torch.get_rng_state(), state)  # measuring must not move the training RNG
    monkeypatch.setenv("COURSE_PEAK_FLOPS", "2.5e10")
    assert device_peak_flops(torch.device("cpu"), "cpu") == 2.5e10
