import math

import pytest
import torch

from labs.common.metrics import flops_per_token, matmul_params
from labs.common.model import CONFIGS, GPTConfig, build_model, count_params, get_config


def test_tiny_is_under_a_million_and_small_in_range():
    assert count_params(build_model("tiny")) < 1_000_000
    assert 10e6 <= count_params(build_model("small")) <= 20e6


def test_gpt2_config_has_gpt2_shape():
    c = CONFIGS["gpt2-124m"]
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size) == (12, 12, 768, 1024)
    # counting from the shape, not building it: 12 L d^2 + V d + T d (+ biases and norms)
    assert 120e6 < 12 * c.n_layer * c.n_embd**2 + c.vocab_size * c.n_embd + c.block_size * c.n_embd < 130e6


def test_forward_shapes_and_initial_loss_is_uniform():
    torch.manual_seed(0)
    model = build_model("tiny").eval()
    x = torch.randint(0, 256, (3, 64))
    logits, loss = model(x, torch.randint(0, 256, (3, 64)))
    assert logits.shape == (3, 64, 256)
    assert abs(loss.item() - math.log(256)) < 0.1  # small init: near-uniform predictions


def test_causal_future_tokens_do_not_change_the_past():
    torch.manual_seed(0)
    model = build_model("tiny").eval()
    x = torch.randint(0, 256, (1, 32))
    y = x.clone()
    y[0, 20:] = (y[0, 20:] + 1) % 256
    with torch.no_grad():
        a, _ = model(x)
        b, _ = model(y)
    assert torch.equal(a[0, :20], b[0, :20])
    assert not torch.equal(a[0, 20:], b[0, 20:])


def test_tied_embedding_is_one_tensor_counted_once():
    model = build_model("tiny")
    assert model.head.weight is model.tok_emb.weight
    unique = {id(p) for p in model.parameters()}
    assert len(unique) == len(list(model.parameters()))


def test_too_long_sequence_is_a_clear_error():
    model = build_model("tiny")
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_unknown_config_names_the_choices():
    with pytest.raises(ValueError, match="tiny"):
        get_config("huge")


def test_matmul_params_equal_linear_and_token_embedding_tensors():
    model = build_model("small")
    linear = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)
                 for p in m.parameters(recurse=False) if p is not model.head.weight)
    assert matmul_params(model.cfg) == linear + model.tok_emb.weight.numel()


def test_flops_per_token_is_6n_plus_attention():
    cfg = GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=1, n_embd=4)
    assert flops_per_token(cfg, 8) == 6 * matmul_params(cfg) + 12 * 1 * 8 * 4
