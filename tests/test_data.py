import numpy as np
import pytest

from labs.common.data import BatchSampler, MarkovSource, TokenFile, ensure_corpus


def test_same_seed_same_tokens_other_seed_other_tokens():
    src = MarkovSource(64, seed=3)
    assert np.array_equal(src.sample(5000, seed=1), MarkovSource(64, seed=3).sample(5000, seed=1))
    assert not np.array_equal(src.sample(5000, seed=1), src.sample(5000, seed=2))


def test_entropy_rate_matches_the_empirical_conditional_entropy():
    src = MarkovSource(16, seed=0, branching=4)
    toks = src.sample(400_000, seed=5, n_chains=64)
    chains = toks[: 64 * (len(toks) // 64)].reshape(64, -1)
    prev, nxt = chains[:, :-1].ravel(), chains[:, 1:].ravel()
    counts = np.zeros((16, 16))
    np.add.at(counts, (prev, nxt), 1)
    p_joint = counts / counts.sum()
    p_cond = counts / counts.sum(1, keepdims=True).clip(min=1)
    mask = counts > 0
    empirical = -(p_joint[mask] * np.log(p_cond[mask])).sum()
    assert abs(empirical - src.entropy_rate()) < 0.01
    assert src.entropy_rate() < src.unigram_entropy() <= np.log(16) + 1e-9


def test_deterministic_chain_has_zero_entropy():
    assert MarkovSource(8, seed=0, branching=1).entropy_rate() == pytest.approx(0.0, abs=1e-12)


def test_corpus_files_and_meta(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    d = ensure_corpus(32, seed=1, n_train=10_000, n_val=1_000)
    tf = TokenFile.open(d)
    assert tf.tokens.dtype == np.uint16 and len(tf.tokens) == 10_000 and tf.tokens.max() < 32
    assert tf.meta["entropy_rate"] == pytest.approx(MarkovSource(32, seed=1).entropy_rate())
    x, y = tf.batch([0, 3], seq_len=8)
    assert x.shape == (2, 8) and (x[:, 1:] == y[:, :-1]).all()
    assert ensure_corpus(32, seed=1, n_train=10_000, n_val=1_000) == d  # second call reuses


def test_sampler_epoch_covers_every_window_once():
    s = BatchSampler(num_windows=100, batch_size=10, seed=0)
    seen = np.concatenate([s.next_ids() for _ in range(10)])
    assert sorted(seen) == list(range(100))
    assert not np.array_equal(s.next_ids(), seen[:10])  # epoch 1 reshuffles
    assert s.epoch == 1


def test_sampler_resumes_exactly_from_its_state():
    a = BatchSampler(num_windows=50, batch_size=8, seed=4)
    for _ in range(9):  # crosses an epoch boundary (6 batches per epoch)
        a.next_ids()
    b = BatchSampler(num_windows=50, batch_size=8, seed=4)
    b.load_state_dict(a.state_dict())
    assert all(np.array_equal(a.next_ids(), b.next_ids()) for _ in range(10))


def test_sampler_refuses_a_checkpoint_of_another_seed():
    with pytest.raises(ValueError, match="seed"):
        BatchSampler(50, 8, seed=1).load_state_dict(BatchSampler(50, 8, seed=2).state_dict())
