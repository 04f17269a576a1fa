"""Turns (checker/relay.py) between real processes, and the audit hook that keeps the reference out of a learner
run's reach (checker/reach.py)."""
import os
import secrets
import subprocess
import sys
import textwrap
import time

import pytest

from checker.channel import Channel
from checker.relay import Relay, turn_rates
from conftest import ROOT

pytestmark = pytest.mark.timeout(60)

SIDE = textwrap.dedent('''
    import os, sys, time
    from checker.channel import Sender
    out, nonce, windows, dies = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "dies"
    s = Sender(out, 0, nonce)
    s.turn()  # warmed up
    for w in range(windows):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.05:  # 50 ms of work
            pass
        if dies and w == 1:
            os._exit(3)
        s.turn()
''')


def _side(tmp_path, name, nonce, windows, dies=False):
    out = tmp_path / f"{name}.result.json"
    return out, [sys.executable, "-c", SIDE, str(out), nonce, str(windows), "dies" if dies else "lives"]


def _race(tmp_path, order, dies=(), cpu=False):
    relay, procs, chans = Relay(order, cpu=cpu), {}, []
    try:
        for name in dict.fromkeys(order):
            nonce = secrets.token_hex(8)
            out, argv = _side(tmp_path, name, nonce, order.count(name), dies=name in dies)
            chan = Channel(out, 1, nonce, on_turn=relay.on_turn(name))
            proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
            relay.join(name, proc.pid, chan)
            procs[name], chans = proc, chans + [chan]
        deadline = time.monotonic() + 30
        while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
            time.sleep(0.02)
            for name, p in procs.items():
                if p.poll() is not None:
                    relay.left(name)
        return relay, {n: p.poll() for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for c in chans:
            c.close()


def test_turns_alternate_in_order_timed_by_the_parent_without_overlap(tmp_path):
    order = ["a", "b", "b", "a", "a", "b"]
    relay, codes = _race(tmp_path, order)
    assert codes == {"a": 0, "b": 0} and relay.violation is None
    assert [w[0] for w in relay.windows] == order
    for (_, _, end), (_, start, _) in zip(relay.windows, relay.windows[1:]):
        assert start >= end  # one window at a time
    rates, why = turn_rates(relay, {"a": 1.0, "b": 1.0})
    assert why is None and all(1 / r >= 0.045 for r in rates["a"] + rates["b"])  # each window held its 50 ms


def test_the_parent_reads_each_windows_cpu_time_from_the_kernel(tmp_path):
    """cpu=True: each window's CPU seconds of the run's process, read by the parent (lab 7's recompute_cost): a
    50 ms busy loop shows as at most its wall window, and as more than nothing (the run reports no time itself)."""
    order = ["a", "b", "b", "a"]
    relay, codes = _race(tmp_path, order, cpu=True)
    assert codes == {"a": 0, "b": 0} and relay.violation is None
    assert [w[0] for w in relay.cpu_windows] == order
    for (_, cpu), (_, t0, t1) in zip(relay.cpu_windows, relay.windows):
        assert 0.005 < cpu <= t1 - t0 + 0.01, (cpu, t1 - t0)
    rates, why = turn_rates(relay, {"a": 1.0, "b": 1.0}, clock="cpu")
    assert why is None and len(rates["a"]) == len(rates["b"]) == 2


def test_a_run_that_dies_mid_order_releases_the_other(tmp_path):
    relay, codes = _race(tmp_path, ["a", "b", "b", "a", "a", "b"], dies=("a",))
    assert codes == {"a": 3, "b": 0}  # b was stopped waiting for a's turn: let go when a died, it finished
    assert turn_rates(relay, {"a": 1.0, "b": 1.0}) == (None, "only 3 of the 6 timed windows happened")


GUARDED = textwrap.dedent('''
    import os, subprocess, sys
    from checker import reach
    hidden, other = sys.argv[1], sys.argv[2]
    reach.guard([hidden])
    def refused(fn):
        try:
            fn()
        except PermissionError as e:
            return "may not read the reference" in str(e)
        return False
    os.symlink(os.path.join(hidden, "step.py"), os.path.join(other, "link.py"))
    print(refused(lambda: open(os.path.join(hidden, "step.py")).read()),
          refused(lambda: open(os.path.join(other, "link.py")).read()),
          refused(lambda: subprocess.run(["git", "show", "HEAD:x"])),
          refused(lambda: subprocess.run(["cat", os.path.join(hidden, "step.py")])),
          open(os.path.join(other, "mine.py")).read() == "mine")
''')


def test_the_audit_hook_refuses_the_hidden_folder_and_nothing_else(tmp_path):
    hidden, other = tmp_path / "solutions", tmp_path / "labs"
    hidden.mkdir(), other.mkdir()
    (hidden / "step.py").write_text("reference")
    (other / "mine.py").write_text("mine")
    r = subprocess.run([sys.executable, "-c", GUARDED, str(hidden), str(other)], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30)
    assert r.stdout.split() == ["True"] * 5, r.stdout + r.stderr


def test_on_one_gpu_the_runs_of_a_relay_share_it_and_others_wait():
    """The sides of a relay live at once, taking turns: on one GPU the second shares the first's, where any other
    run waits for it (Harness._place)."""
    from types import SimpleNamespace

    from checker.harness import Harness
    from checker.placement import GpuPool

    h = SimpleNamespace(gpus=GpuPool(["0"], 1))
    relay = Relay(["a", "b"])
    assert Harness._place(h, {"name": "a", "relay": relay}, wait=False) == ["0"]
    assert Harness._place(h, {"name": "b", "relay": relay}, wait=True) == ["0"]
    assert Harness._place(h, {"name": "c"}, wait=True) is False  # not of the relay: waits for a free GPU


def test_a_run_of_several_ranks_takes_turns_on_rank_0_only(tmp_path):
    """Rank 0 asks for the whole run (its other ranks wait in collectives): only it has a go pipe, another rank's turn()
    returns at once asking nothing, and a turn asked on another rank's pipe (not the checker's code) ends the order."""
    from checker.channel import Sender

    relay, nonce, out = Relay(["a", "b"]), secrets.token_hex(8), tmp_path / "a.result.json"
    chan = Channel(out, 2, nonce, on_turn=relay.on_turn("a"))
    try:
        first, other = Sender(out, 0, nonce), Sender(out, 1, nonce)
        assert first.go_fd is not None and other.go_fd is None
        other.turn()  # returns at once: nothing sent, nothing waited for
        time.sleep(0.3)
        assert relay.violation is None and not relay.windows
        other.send(turn=True)  # forged
        deadline = time.monotonic() + 5
        while relay.violation is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert relay.violation and "rank 1" in relay.violation
        assert turn_rates(relay, {"a": 1.0, "b": 1.0}) == (None, relay.violation)
    finally:
        chan.close()
