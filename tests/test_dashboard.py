"""labs/notebook/dashboard.py without a browser: a fake 2-rank "training" run, its plot data, Stop, watch, the grade
table."""
from __future__ import annotations

import _thread
import json
import signal
import sys
import threading
import time

import pytest

from labs.common.metrics import read_log
from labs.instruments import proctree
from labs.notebook.dashboard import Run, command, launch, split_rank, watch
from labs.notebook.grade_table import grade_table

# A launcher in the manner of torchrun: two ranks, each with RANK in its environment, each prefixing its
# lines; rank 0 (and rank 1, for its own memory) append a step record to LOG every 0.1 s.
LAUNCHER = """
import os, subprocess, sys
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], env={**os.environ, "RANK": str(r)})
         for r in range(2)]
sys.exit(max(p.wait() for p in procs))
"""
WORKER = """
import json, os, sys, time
rank, log, steps = int(os.environ["RANK"]), sys.argv[1], int(sys.argv[2])
with open(log, "a", buffering=1) as f:
    for step in range(1, steps + 1):
        time.sleep(0.1)
        f.write(json.dumps({"rank": rank, "step": step, "loss": 5.0 / step + rank, "tokens_per_s": 1000.0 * step,
                            "model_state_bytes": 2**20 * (1 + rank)}) + "\\n")
        sys.stdout.write(f"[rank={rank}] step {step}\\n")  # one write: print() makes two, which ranks may interleave
"""
# Rank 1 ignores SIGTERM (only SIGKILL ends it) and starts a process in a session of its own, out of
# reach of the launcher's process group, as lab 4's run.py does with torchrun.
STUBBORN = """
import os, signal, subprocess, sys, time
if os.environ["RANK"] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print("ready", flush=True)
time.sleep(300)
"""


def fake_run(tmp_path, worker=WORKER, *args, **kw) -> Run:
    kw = {"show": False, "poll_s": 0.05, **kw}
    return launch([sys.executable, "-c", LAUNCHER, worker, *args], log=tmp_path / "log.jsonl", title="fake", **kw)


@pytest.mark.timeout(60)
def test_plot_data_follows_the_log_while_the_run_goes(tmp_path):
    run = fake_run(tmp_path, WORKER, tmp_path / "log.jsonl", 15)
    seen = []
    while not run.finished:  # while it runs the loss curve only grows, and holds what the file held
        steps, losses = run.series()["loss"].get("loss", ([], []))
        seen.append(len(steps))
        time.sleep(0.1)
    records = run.wait()
    assert run.returncode == 0 and run.status == "finished"
    assert 0 < max(n for n in seen if n < 15), f"no partial curve was ever seen: {seen}"
    assert seen == sorted(seen)
    assert records == read_log(tmp_path / "log.jsonl") and len(records) == 30
    s = run.series()
    rank0 = [r for r in records if r["rank"] == 0]
    assert s["loss"]["loss"] == ([r["step"] for r in rank0], [r["loss"] for r in rank0])
    assert s["tokens/s"]["tokens/s"][1] == [r["tokens_per_s"] for r in rank0]
    assert s["memory (MiB)"]["model state r0"][1] == [1.0] * 15  # every rank that logs it
    assert s["memory (MiB)"]["model state r1"][1] == [2.0] * 15
    # ranks found by RANK in their environment (before the launcher starts them, it is the "main process")
    assert {"rank 0", "rank 1"} <= set(s["RSS per rank (MiB), sampled"]) <= {"rank 0", "rank 1", "main process"}
    assert len(run.output(1)) == 15 and run.output(1)[-1] == "step 15"
    assert run.summary().startswith("step 15 | loss 0.3333 | 15,000 tokens/s")
    assert run.render()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(60)
def test_stop_button_ends_every_process_even_one_that_ignores_sigterm(tmp_path):
    run = fake_run(tmp_path, STUBBORN, grace_s=1.0, show=True)  # widgets without a frontend: click() still works
    deadline = time.monotonic() + 30
    while len(run.output()) < 2 or len(proctree.descendants(run.proc.pid)) < 3:
        assert time.monotonic() < deadline, run.output()
        time.sleep(0.05)
    tree = [run.proc.pid, *proctree.descendants(run.proc.pid)]
    assert len(tree) == 4  # launcher, 2 ranks, rank 1's process in its own session
    t0 = time.monotonic()
    run._w_stop.click()  # as in the browser: the stop runs in a thread, the kernel stays free
    while not (run.finished and run.signalled):
        assert time.monotonic() - t0 < 20, "Stop did not end the run"
        time.sleep(0.05)
    took = time.monotonic() - t0
    assert run.status == "stopped" and run._w_stop.disabled
    assert set(tree) <= set(run.signalled)
    assert not [p for p in tree if proctree.alive(p)], "a process of the run is still there"
    assert 0.9 < took < 10, f"{took:.1f} s: SIGKILL should come after the 1 s grace"
    assert run.wait() == []  # a stopped run is not a failure; it wrote no records


def _interrupt_main_inside(function: str, timeout_s: float = 20.0) -> None:
    """Raise KeyboardInterrupt in the main thread once its stack is inside `function` (not before: an
    interrupt that lands before the wait is not the case under test), as the notebook's interrupt button does."""
    main = threading.main_thread().ident
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main)
        while frame is not None and frame.f_code.co_name != function:
            frame = frame.f_back
        if frame is not None:
            _thread.interrupt_main()
            return
        time.sleep(0.01)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt here, as in a notebook cell (ipykernel installs default_int_handler
    while a cell runs). A process started in the background of a non-interactive shell (a CI runner's
    `cmd &`, nohup) inherits SIGINT ignored, and then `_thread.interrupt_main()` does nothing at all."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.timeout(60)
def test_an_interrupt_during_wait_stops_every_rank(tmp_path, sigint_raises):
    run = fake_run(tmp_path, STUBBORN, grace_s=0.5)
    deadline = time.monotonic() + 30
    while len(run.output()) < 2 or len(proctree.descendants(run.proc.pid)) < 3:
        assert time.monotonic() < deadline, run.output()
        time.sleep(0.05)
    tree = [run.proc.pid, *proctree.descendants(run.proc.pid)]
    assert len(tree) == 4  # launcher, 2 ranks, rank 1's process in its own session
    threading.Thread(target=_interrupt_main_inside, args=("_wait",), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run.wait()
    assert run.status == "stopped"
    assert not [p for p in tree if proctree.alive(p)]


@pytest.mark.timeout(60)
def test_a_failed_run_raises_with_its_last_lines(tmp_path):
    script = ("print('[rank1]: boom', flush=True); print('[rank0]: fine', flush=True); print('ChildFailedError'); "
              "exit(3)")
    run = launch([sys.executable, "-c", script], show=False, poll_s=0.05)
    with pytest.raises(RuntimeError, match=r"exit 3(.|\n)*rank 0, last lines:\nfine\n--- rank 1, last lines:\nboom\n"
                                           r"--- the launcher, last lines:\nChildFailedError"):
        run.wait()
    assert run.status == "failed (exit 3)" and run.wait(check=False) == []


@pytest.mark.timeout(60)
def test_widgets_update_without_a_frontend(tmp_path):
    """show=True outside Jupyter: ipywidgets objects are made and updated (nothing renders them)."""
    run = launch([sys.executable, "-c", LAUNCHER, WORKER, tmp_path / "log.jsonl", 5], log=tmp_path / "log.jsonl",
                 title="fake", show=True, poll_s=0.05, refresh_s=0.1, plot_s=0.1)
    run.wait()
    assert run._w_plot.value[:4] == b"\x89PNG"
    assert list(run._w_view.options) == ["all ranks", "rank 0", "rank 1"], run.lines
    assert "finished" in run._w_status.value and run._w_stop.disabled
    run._w_view.value = "rank 1"
    assert "step 5" in run._w_out.value and "[rank1]" not in run._w_out.value


@pytest.mark.timeout(60)
def test_watch_follows_files_it_did_not_write_and_stops_through_the_callback(tmp_path):
    text, log, stopped = tmp_path / "job.out", tmp_path / "log.jsonl", []

    def job():  # a job somebody else runs (Slurm): it ends when it is cancelled
        with open(text, "a", buffering=1) as t, open(log, "a", buffering=1) as f:
            for step in range(1, 1000):
                if stopped:
                    t.write("slurmstepd: *** JOB 42 CANCELLED ***\n")
                    return
                t.write(f"[rank1]: step {step}\n")
                f.write(json.dumps({"rank": 0, "step": step, "loss": 1.0 / step}) + "\n")
                time.sleep(0.05)

    worker = threading.Thread(target=job)
    worker.start()
    w = watch(log=log, text_log=text, stop=lambda: stopped.append(True), done=lambda: not worker.is_alive(),
              title="job 42", show=False, poll_s=0.05)
    while len(w.records()) < 5:
        time.sleep(0.05)
    w.stop()
    records = w.wait(timeout=20)
    assert stopped == [True] and w.status == "stopped"
    assert w.output()[-1] == "slurmstepd: *** JOB 42 CANCELLED ***"
    assert w.output(1)[0] == "step 1"
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    assert w.series()["loss"]["loss"][1] == [r["loss"] for r in records]


def test_command_and_rank_prefixes():
    assert command("m.train", "--steps", 3) == [sys.executable, "-m", "m.train", "--steps", "3"]
    tr = command("m.train", nproc=2)
    assert tr[2] == "torch.distributed.run" and "--nproc_per_node=2" in tr and tr[-2:] == ["-m", "m.train"]
    assert split_rank("[rank3]: [rank=3] hello") == (3, "hello")
    assert split_rank("[default1]:x") == (1, "x")
    assert split_rank("[rank=2] where a step went") == (2, "where a step went")
    assert split_rank("W0101 torchrun warning") == (None, "W0101 torchrun warning")


SAMPLE = {"lab": "lab2", "target": "solutions", "device": "cpu", "world_size": 2, "passed": False,
          "complete": False, "seconds": 31.2,
          "checks": [{"name": "grad_equivalence", "passed": True, "value": 0.0, "threshold": 1e-6,
                      "unit": "max abs diff", "message": "gradients equal one process", "hint": ""},
                     {"name": "throughput", "passed": False, "value": 0.41, "threshold": 0.7, "unit": "x torch DDP",
                      "message": "slower than torch DDP", "hint": "overlap the all-reduce with backward <3"}]}


def test_grade_table_renders_the_checker_json(tmp_path):
    path = tmp_path / "grade.json"
    path.write_text(json.dumps(SAMPLE))
    t = grade_table(path)
    text = str(t).splitlines()
    assert text[0].startswith("checker grade lab2 - solutions/ on cpu, world size 2, 31.2 s: 1/2 checks passed")
    assert text[1].split() == ["check", "result", "measured", "threshold", "what", "happened", "/", "what", "to", "do"]
    assert text[2].split()[:2] == ["grad_equivalence", "PASS"] and "1e-06 max abs diff" in text[2]
    assert text[3].split()[:4] == ["throughput", "FAIL", "0.41", "x"] and "hint: overlap" in text[3]
    page = t._repr_html_()
    assert page.count("<tr>") == 3 and "&lt;3" in page and ">FAIL<" in page and not t.passed
    both = grade_table({"passed": True, "labs": [SAMPLE, {**SAMPLE, "lab": "lab3"}]})
    assert str(both).count("checker grade lab") == 2


def test_grade_table_shows_a_check_that_could_not_run_as_not_run():
    slurm = {"name": "preempt_resume", "passed": False, "status": "not_run", "value": None, "threshold": None,
             "unit": "", "message": "not run on this machine: no Slurm", "hint": "`sudo make slurm-up`"}
    t = grade_table({**SAMPLE, "checks": [SAMPLE["checks"][0], slurm]})
    row = str(t).splitlines()[3]
    assert row.split()[:3] == ["preempt_resume", "NOT", "RUN"] and "to run it: `sudo make slurm-up`" in row, row
    assert ">NOT RUN<" in t._repr_html_() and ">FAIL<" not in t._repr_html_()


def test_grade_table_without_a_report_shows_what_the_checker_said(tmp_path):
    import subprocess
    proc = subprocess.CompletedProcess([], 2, stdout="", stderr="labs/lab9 not found: run from the course repository")
    t = grade_table(tmp_path / "missing.json", proc)
    assert "wrote no report (exit status 2)" in str(t) and "lab9 not found" in t._repr_html_()
