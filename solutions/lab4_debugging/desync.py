"""A job whose ranks stop agreeing on their collectives, run with torch's flight recorder on.

Not an exercise: this is the evidence you analyse in forensics.py. Three ranks train a small MLP by hand (the
gradient all-reduces DDP would issue, a loss and a token count all-reduced for the log, a batch broadcast from
rank 0, an all_gather of step times every other step) and rank 0 sends rank 1 its step time each step (a
point-to-point heartbeat, as a pipeline stage hands its activations to the next: two ranks only). A case injects
one fault on one rank at one step:

  extra    that rank calls a collective the others don't (a debug broadcast behind `if rank == ...`)
  order    that rank all_gathers its step time before all-reducing the loss; the others after
  size     that rank receives the step's batch broadcast into a longer buffer (it padded its batch)
  dtype    that rank all-reduces its token count as int32; the others as float32
  behind   that rank stalls before the step's collectives (a data loader stuck on a dead file server)

Every rank keeps its last collectives in the flight recorder (TORCH_FR_BUFFER_SIZE entries) and writes them,
in the format torch's `fr_trace` reads, to DIR/rank<R> when the job ends: on a collective's timeout, on
SIGTERM from the launcher, or at a normal end. The `behind` case keeps only WRAPPED entries, as a long job's
2,000 would: the ring has wrapped, and each rank's dump starts at another sequence number. Gloo's recorder
(2.13, measured) leaves sends and recvs out; NCCL's records each with is_p2p set, its own p2p_seq_id and the
collective_seq_id of the last collective before it, so the job writes its sends and recvs into its dump as
NCCL's would, sharing the ring with the collectives. Run it:

    python -m labs.lab4_debugging.desync extra                  # -> runs/lab4/dumps/extra/rank0..2
    python -m torch.distributed.flight_recorder.fr_trace runs/lab4/dumps/extra --prefix rank -j

On gloo (measured here, torch 2.13), the faults end differently: `extra`, `order` and `behind` hang until the
process group's timeout; `size` (a receive buffer longer than what was sent) and `dtype` (int32 and float32: the
same 4 bytes) complete silently: nothing the job prints shows them, only the recorder does. (A mismatch that
sends a rank MORE bytes than it expects aborts that rank inside gloo, with no dump: the cases avoid it.) NCCL
(not measured here) does not compare sizes either; a hung NCCL collective is ended by its watchdog, which dumps
the recorder itself (TORCH_NCCL_DUMP_ON_TIMEOUT=1, TORCH_FR_DUMP_TEMP_FILE=prefix). This job runs on the CPU,
to show the same evidence anywhere.
"""
from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

KINDS = ("extra", "order", "size", "dtype", "behind")
# What the analyser must call each case's first disagreement (forensics.find_desync's `kind`).
MISMATCH = {"extra": "op", "order": "op", "size": "size", "dtype": "dtype", "behind": "missing"}
WORLD = 3            # with three ranks the one that diverged is the odd one out; with two, either could be
TIMEOUT_S = 3.0      # process-group timeout: a hang becomes an error (and a dump) after this long
BUFFER = 2000        # flight-recorder entries kept per rank (the job issues ~7 per step: ~60 in all)
# The behind case's ring: the earliest fault (step 2) comes after 4 + 5 = 9 collectives (the first broadcasts,
# step 1's five), so every rank's ring has wrapped by then, and no entry's position in a dump (at most 8) is the
# sequence number of the fault (at least 10).
WRAPPED = 8


@dataclass
class Case:
    kind: str
    rank: int        # the rank that diverges
    step: int        # at this step
    steps: int = 8
    timeout_s: float = TIMEOUT_S  # the checker stretches it on a loaded machine (CHECKER_BUDGET_SCALE)
    buffer: int = BUFFER          # TORCH_FR_BUFFER_SIZE: the recorder's ring, in entries

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")


def case(kind: str, variant: int = 0) -> Case:
    """A case's rank and step, moved by the variant. The size case's rank is never 0: rank 0 sends the broadcast,
    and a receiver given more bytes than its buffer holds aborts inside gloo without a dump."""
    v = variant + KINDS.index(kind)  # the kinds of one variant do not all pick the same rank
    rank = 1 + v % (WORLD - 1) if kind == "size" else v % WORLD
    step = 2 + (variant * 3 + KINDS.index(kind)) % 5
    return Case(kind, rank, step + step % 2 if kind == "order" else step,  # order: a step with an all_gather
                buffer=WRAPPED if kind == "behind" else BUFFER)


def _recorded() -> list[dict]:
    """The recorder's entries on this rank, oldest first."""
    import torch

    return pickle.loads(torch._C._distributed_c10d._dump_fr_trace())["entries"]


def dump(out: Path, rank: int, p2p: list[dict], buffer: int) -> Path:
    """This rank's flight recorder, pickled as torch writes it (what fr_trace reads), written atomically; its
    sends and recvs (`p2p`, logged by send_recv) in the ring as NCCL keeps them."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    trace["entries"] = ring(trace["entries"], p2p, buffer)
    # gloo's dump names the default group "" in pg_config but "0" in every entry's process_group; fr_trace (2.13)
    # looks groups up by the entries' name and stops with KeyError: ('0', 0). Named as the entries name it:
    groups = {e["process_group"] for e in trace["entries"]}
    for name, desc in groups:
        if name not in trace["pg_config"] and "" in trace["pg_config"]:
            trace["pg_config"][name] = {**trace["pg_config"][""], "name": name, "desc": desc}
    if groups:
        trace["pg_config"].pop("", None)
    path = out / f"rank{rank}"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(trace))
    tmp.replace(path)
    return path


def ring(collectives: list[dict], p2p: list[dict], buffer: int) -> list[dict]:
    """The last `buffer` entries of both kinds, oldest first, each record_id counting both (as NCCL's ring does).
    A collective's record_id counts the collectives before it; the sends and recvs logged before it come on top."""
    ahead = [{**e, "record_id": e["record_id"] + sum(p["collective_seq_id"] < e["collective_seq_id"] for p in p2p)}
             for e in collectives]
    return sorted(ahead + p2p, key=lambda e: e["record_id"])[-buffer:]


def send_recv(tensor, src: int, dst: int, rank: int, p2p: list[dict]) -> None:
    """`tensor` from rank src to rank dst (this rank is one of them), logged in `p2p` as NCCL's recorder keeps a
    point-to-point op: collective_seq_id that of the last collective, p2p_seq_id its own count."""
    import traceback

    import torch.distributed as dist

    if rank == src:
        dist.send(tensor, dst)
    else:
        dist.recv(tensor, src)
    last = _recorded()[-1]  # the last collective: the job's first broadcasts come before any send
    since = sum(p["collective_seq_id"] == last["collective_seq_id"] for p in p2p)
    dtype = tensor.type().split(".")[-1].removesuffix("Tensor")  # torch.FloatTensor -> Float, as the recorder
    p2p.append({**last, "is_p2p": True, "p2p_seq_id": len(p2p) + 1, "record_id": last["record_id"] + 1 + len(p2p),
                "op_id": last["op_id"] + 1 + since, "time_created_ns": time.time_ns(),
                "profiling_name": f"gloo:send {src}->{dst}" if rank == src else f"gloo:recv {dst}<-{src}",
                "input_sizes": [list(tensor.shape)], "output_sizes": [list(tensor.shape)],
                "input_dtypes": [dtype], "output_dtypes": [dtype],
                "frames": [{"name": f.name, "filename": f.filename, "line": f.lineno}
                           for f in reversed(traceback.extract_stack()[:-1])]})


def _next_seq() -> int:
    """The collective sequence number the next collective of the default group will get (the recorder's own)."""
    done = [e["collective_seq_id"] for e in _recorded() if not e.get("is_p2p")]
    return max(done, default=0) + 1


def train(c: Case, out: Path, p2p: list[dict] | None = None) -> dict:
    """One rank's job. Returns what it did; the rank that injects the fault also returns `truth`: where the ranks
    first disagree, as the recorder numbers it (the checker's answer key, never shown to the analyser). `p2p`
    collects this rank's sends and recvs for its dump (pass a list to dump them from a signal handler too)."""
    import torch
    import torch.distributed as dist

    from labs.common import dist as cdist

    p2p = [] if p2p is None else p2p
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(c.buffer)  # read when the process group is created
    env = cdist.init("cpu", timeout_s=c.timeout_s)  # gloo: the recorder's evidence, not speed, is the subject
    rank, world = env.rank, env.world_size
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    truth, outcome, steps = None, "completed", 0
    for p in model.parameters():
        dist.broadcast(p.data, 0)  # every rank starts from rank 0's weights

    def diverge(kind: str, faulty: bool) -> bool:  # on the faulty rank, just before the collective it gets wrong
        nonlocal truth
        if faulty and c.kind == kind:
            truth = {"rank": rank, "seq": _next_seq(), "kind": MISMATCH[kind]}
        return faulty and c.kind == kind

    try:
        for step in range(1, c.steps + 1):
            faulty = rank == c.rank and step == c.step
            if diverge("behind", faulty):
                _stall(out, rank, world, 10 * c.timeout_s)
                raise Stalled("stalled before this step's collectives; the peers gave up")
            t0 = time.perf_counter()
            ids = torch.zeros(16 + (8 if diverge("size", faulty) else 0), dtype=torch.int64)
            if rank == 0:
                ids.copy_(torch.randint(0, 1000, (16,)))
            dist.broadcast(ids, 0)  # rank 0 picks the step's samples
            g = torch.Generator().manual_seed(int(ids[:16].sum()) * world + rank)
            x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            if diverge("extra", faulty):
                dist.broadcast(torch.zeros(1), rank)  # a debug print of this rank's state, left in
            for layer in (model[2], model[0]):        # two buckets, last layer first, as DDP reduces them
                flat = torch.cat([layer.weight.grad.reshape(-1), layer.bias.grad])
                dist.all_reduce(flat)
                flat /= world
                layer.weight.grad.copy_(flat[:-layer.bias.numel()].view_as(layer.weight))
                layer.bias.grad.copy_(flat[-layer.bias.numel():])
            opt.step()
            tokens = torch.tensor([16], dtype=torch.int32 if diverge("dtype", faulty) else torch.float32)
            dist.all_reduce(tokens)
            stat, took = loss.detach().reshape(1), torch.tensor([time.perf_counter() - t0])
            times = [torch.zeros(1) for _ in range(world)]
            if diverge("order", faulty):
                dist.all_gather(times, took)
                dist.all_reduce(stat)
            else:
                dist.all_reduce(stat)
                if step % 2 == 0:
                    dist.all_gather(times, took)
            if rank in (0, 1):  # the heartbeat, after the step's collectives: on two ranks only
                send_recv(took if rank == 0 else torch.zeros(1), 0, 1, rank, p2p)
            steps = step
        checksum = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).sum().reshape(1)
        every = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(every, checksum)  # the job's last word: do the ranks hold the same weights?
        if len({float(t) for t in every}) > 1:
            outcome = "completed, but the ranks' weights differ: " + " ".join(f"r{r}={float(t):.6f}"
                                                                             for r, t in enumerate(every))
    except (RuntimeError, Stalled) as e:  # gloo's timeout, or a peer that left: the hang, turned into an error
        outcome = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    path = dump(out, rank, p2p, c.buffer)
    print(f"[rank={rank}] after {steps} steps: {outcome}; flight recorder -> {path}", flush=True)
    return {"rank": rank, "steps": steps, "outcome": outcome, "dump": str(path), "truth": truth}


class Stalled(Exception):
    pass


def _stall(out: Path, rank: int, world: int, cap_s: float) -> None:
    """A rank stuck outside any collective (a stand-in for a data loader waiting on a dead file server). Its peers
    time out in the next collective and dump; it waits until they have (or the launcher's SIGTERM), then dumps."""
    peers = [out / f"rank{r}" for r in range(world) if r != rank]
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline and not all(p.exists() for p in peers):
        time.sleep(0.05)


def rank_main(argv: list[str]) -> int:
    """Under torchrun: `python -m labs.lab4_debugging.desync --rank-job CASE_JSON OUT`."""
    c, out = Case(**json.loads(argv[0])), Path(argv[1])
    rank = int(os.environ.get("RANK", 0))
    p2p: list[dict] = []

    def on_term(signum, frame):  # the launcher stops the rank: keep its evidence first
        dump(out, rank, p2p, c.buffer)
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    res = train(c, out, p2p)
    if res["truth"]:
        (out / "truth.json").write_text(json.dumps(res["truth"]))  # the injected fault, for the notebook
    return 0


def main(argv=None) -> int:
    import argparse
    import subprocess

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--rank-job"]:
        return rank_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("--variant", type=int, default=0, help="move the faulty rank and step (the checker does)")
    ap.add_argument("--out", type=Path, default=None, help="default: runs/lab4/dumps/KIND")
    a = ap.parse_args(argv)
    c = case(a.kind, a.variant)
    out = a.out or Path("runs/lab4/dumps") / a.kind
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*"):
        old.unlink()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
           "--max-restarts=0", "-m", __spec__.name if __spec__ else "labs.lab4_debugging.desync",
           "--rank-job", json.dumps(asdict(c)), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    rc = subprocess.run(cmd, env=env, timeout=120).returncode
    dumps = ", ".join(sorted(p.name for p in out.glob("rank*")))
    print(f"{a.kind} (variant {a.variant}): torchrun exit {rc}; dumps: {dumps} in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
