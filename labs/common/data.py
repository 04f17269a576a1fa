"""Generated training data: a seeded Markov chain over the vocabulary, stored as uint16 token files.

Why a Markov chain: its entropy rate H is known exactly, so every loss curve in the course
can be drawn against the floor no model can beat (cross-entropy >= H, in nats per token).
Three reference lines a learner can read off any plot:
    ln V        a model that predicts uniformly (the loss at initialisation)
    H(pi)       a model that learned only the token frequencies (the unigram entropy)
    H           the floor: the model learned the chain

Files (no download, ever): data/markov-v{V}-s{seed}/{train,val}.bin (uint16 memmap) + meta.json.
Write them with `python -m labs.common.data --vocab 256` (the Makefile and the checker do it for you).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
FORMAT_VERSION = 1


class MarkovSource:
    """Each token has `branching` possible successors with Dirichlet(alpha) probabilities."""

    def __init__(self, vocab_size: int, seed: int = 0, branching: int = 8, alpha: float = 1.0):
        if not 2 <= vocab_size <= 65535:
            raise ValueError("vocab_size must fit uint16 token files (2..65535)")
        rng = np.random.default_rng(seed)
        self.vocab_size = vocab_size
        self.succ = rng.integers(0, vocab_size, size=(vocab_size, branching))
        self.probs = rng.dirichlet(np.full(branching, alpha), size=vocab_size)
        self.cum = np.cumsum(self.probs, axis=1)
        self.cum[:, -1] = 1.0  # guard the inverse-CDF lookup against rounding

    def stationary(self, iters: int = 500) -> np.ndarray:
        """pi with pi = pi P, by power iteration on the sparse transition table."""
        pi = np.full(self.vocab_size, 1.0 / self.vocab_size)
        for _ in range(iters):
            nxt = np.bincount(self.succ.ravel(), weights=(pi[:, None] * self.probs).ravel(),
                              minlength=self.vocab_size)
            # Average with the previous iterate so periodic chains converge too.
            pi = 0.5 * (pi + nxt)
        return pi / pi.sum()

    def entropy_rate(self) -> float:
        """H = sum_i pi_i * H(P_i,.) in nats: the best achievable mean cross-entropy per token."""
        pi = self.stationary()
        # Successors may repeat within a row; merge them before taking the row entropy.
        row_h = np.empty(self.vocab_size)
        for i in range(self.vocab_size):
            p = np.bincount(self.succ[i], weights=self.probs[i])
            p = p[p > 0]
            row_h[i] = -(p * np.log(p)).sum()
        return float((pi * row_h).sum())

    def unigram_entropy(self) -> float:
        pi = self.stationary()
        pi = pi[pi > 0]
        return float(-(pi * np.log(pi)).sum())

    def sample(self, n_tokens: int, seed: int, n_chains: int = 1024) -> np.ndarray:
        """n_tokens from n_chains independent chains (vectorised), each started from pi."""
        rng = np.random.default_rng(seed)
        steps = -(-n_tokens // n_chains)
        out = np.empty((n_chains, steps), dtype=np.uint16)
        state = rng.choice(self.vocab_size, size=n_chains, p=self.stationary())
        for t in range(steps):
            out[:, t] = state
            u = rng.random(n_chains)
            j = (u[:, None] > self.cum[state]).sum(axis=1)
            state = self.succ[state, j]
        return out.reshape(-1)[:n_tokens]


def corpus_dir(vocab_size: int, seed: int = 0) -> Path:
    root = Path(os.environ.get("COURSE_DATA_DIR", REPO_ROOT / "data"))
    return root / f"markov-v{vocab_size}-s{seed}"


def ensure_corpus(vocab_size: int, seed: int = 0, n_train: int = 4_000_000, n_val: int = 200_000) -> Path:
    """Write the corpus once; later calls return the directory. Safe to call from many ranks:
    each file is written under a temporary name and renamed into place."""
    d = corpus_dir(vocab_size, seed)
    meta_path = d / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("format") == FORMAT_VERSION and (meta.get("n_train"), meta.get("n_val")) == (n_train, n_val):
            return d
    d.mkdir(parents=True, exist_ok=True)
    src = MarkovSource(vocab_size, seed)
    for split, n, s in (("train", n_train, seed + 1), ("val", n_val, seed + 2)):
        tmp = d / f".{split}.bin.{os.getpid()}"
        src.sample(n, seed=s).tofile(tmp)
        os.replace(tmp, d / f"{split}.bin")
    meta = {
        "format": FORMAT_VERSION, "vocab_size": vocab_size, "seed": seed,
        "n_train": n_train, "n_val": n_val,
        "entropy_rate": src.entropy_rate(), "unigram_entropy": src.unigram_entropy(),
        "uniform_entropy": float(np.log(vocab_size)),
    }
    tmp = d / f".meta.json.{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, meta_path)
    return d


@dataclass
class TokenFile:
    """A memory-mapped token file: nothing is read until a batch asks for it."""

    tokens: np.ndarray
    meta: dict
    directory: Path

    @classmethod
    def open(cls, directory: Path, split: str = "train") -> "TokenFile":
        directory = Path(directory)
        meta = json.loads((directory / "meta.json").read_text())
        return cls(np.memmap(directory / f"{split}.bin", dtype=np.uint16, mode="r"), meta, directory)

    def num_windows(self, seq_len: int) -> int:
        # Window w covers tokens [w*T, w*T + T] (T+1 tokens: inputs and shifted targets).
        return (len(self.tokens) - 1) // seq_len

    def batch(self, window_ids, seq_len: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        rows = np.stack([self.tokens[w * seq_len: w * seq_len + seq_len + 1] for w in window_ids])
        t = torch.from_numpy(rows.astype(np.int64))
        return t[:, :-1].contiguous().to(device), t[:, 1:].contiguous().to(device)


class BatchSampler:
    """Deterministic, resumable order over the windows of a token file.

    Each epoch is a permutation drawn from a generator seeded by (seed, epoch), so the sampler's
    whole state is two integers: the epoch and how many windows of it were consumed. Resuming
    needs no RNG state, and any process can recompute any epoch's order.

    Lab 2 shards it by rank (lab2_ddp/sharding.py states what must hold there: the ranks' batches of a
    step, concatenated in rank order, are exactly the global batch one process's sampler reads).
    """

    def __init__(self, num_windows: int, batch_size: int, seed: int = 0):
        self.num_windows = num_windows
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.cursor = 0

    def epoch_order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng((self.seed, epoch)).permutation(self.num_windows)

    def next_ids(self) -> np.ndarray:
        order = self.epoch_order(self.epoch)
        if self.cursor + self.batch_size > len(order):  # drop the ragged tail, start a new epoch
            self.epoch, self.cursor = self.epoch + 1, 0
            order = self.epoch_order(self.epoch)
        ids = order[self.cursor: self.cursor + self.batch_size]
        self.cursor += self.batch_size
        return ids

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(f"checkpoint sampler seed {state['seed']} != this run's {self.seed}")
        self.epoch, self.cursor = state["epoch"], state["cursor"]


def main() -> None:
    ap = argparse.ArgumentParser(description="Write the generated Markov corpus for a vocabulary size.")
    ap.add_argument("--vocab", type=int, nargs="+", default=[256])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for v in args.vocab:
        d = ensure_corpus(v, args.seed)
        meta = json.loads((d / "meta.json").read_text())
        print(f"{d}: floor H={meta['entropy_rate']:.3f} nats, unigram {meta['unigram_entropy']:.3f}, "
              f"uniform {meta['uniform_entropy']:.3f}")


if __name__ == "__main__":
    main()
