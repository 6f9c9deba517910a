"""ember.nn.functional against torch.nn.functional in float64: values and gradients."""

import numpy as np
import pytest

import ember
import ember.nn.functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

RNG = np.random.default_rng(7)


def pair(shape):
    """The same float64 values as an ember and a torch tensor, both requiring grad."""
    a = RNG.standard_normal(shape)
    return (ember.tensor(a.tolist(), dtype=ember.float64, requires_grad=True),
            torch.tensor(a, requires_grad=True))


def check(e_out, t_out, e_inputs, t_inputs):
    """Values, then the gradients of a non-uniform weighting of the output."""
    np.testing.assert_allclose(e_out.detach().numpy(), t_out.detach().numpy(), rtol=0, atol=1e-12)
    g = RNG.standard_normal(tuple(t_out.shape))
    (e_out * ember.tensor(g.tolist(), dtype=ember.float64)).sum().backward()
    (t_out * torch.tensor(g)).sum().backward()
    for e, t in zip(e_inputs, t_inputs):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=0, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmaxes(name):
    x, tx = pair((3, 5))
    check(getattr(F, name)(x, -1), getattr(TF, name)(tx, -1), [x], [tx])


@needs_torch
def test_linear_relu_gelu():
    x, tx = pair((2, 3, 4))
    w, tw = pair((5, 4))
    b, tb = pair((5,))
    check(F.linear(x, w, b), TF.linear(tx, tw, tb), [x, w, b], [tx, tw, tb])
    x, tx = pair((4, 6))
    check(F.gelu(x) + F.relu(x), TF.gelu(tx) + TF.relu(tx), [x], [tx])
    x, tx = pair((4, 6))
    check(F.gelu(x, approximate="tanh"), TF.gelu(tx, approximate="tanh"), [x], [tx])


@needs_torch
def test_layer_norm():
    x, tx = pair((3, 6))
    w, tw = pair((6,))
    b, tb = pair((6,))
    check(F.layer_norm(x, (6,), w, b, eps=1e-5), TF.layer_norm(tx, (6,), tw, tb, eps=1e-5),
          [x, w, b], [tx, tw, tb])
    with pytest.raises(RuntimeError, match="last dim only"):
        F.layer_norm(x, (3, 6))


@needs_torch
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_with_ignore_index_and_label_smoothing(smoothing):
    x, tx = pair((5, 4))
    target = [1, 0, 3, -100, 2]
    loss = F.cross_entropy(x, ember.tensor(target), ignore_index=-100, label_smoothing=smoothing)
    tloss = TF.cross_entropy(tx, torch.tensor(target), ignore_index=-100, label_smoothing=smoothing)
    check(loss, tloss, [x], [tx])


@needs_torch
def test_masked_fill():
    x, tx = pair((3, 4))
    mask = RNG.random((3, 4)) < 0.5
    check(F.masked_fill(x, ember.tensor(mask.tolist()), 0.5),
          tx.masked_fill(torch.tensor(mask), 0.5), [x], [tx])


@needs_torch
@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention_returns_output_and_weights(causal):
    q, tq = pair((2, 3, 4, 8))
    k, tk = pair((2, 3, 4, 8))
    v, tv = pair((2, 3, 4, 5))
    allowed = RNG.random((4, 4)) < 0.7
    np.fill_diagonal(allowed, True)  # no query without a key
    mask = None if causal else ember.tensor(allowed.tolist())
    out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    # PyTorch 1.13 has no scaled_dot_product_attention: its definition, in torch ops
    keep = torch.tensor(np.tril(np.ones((4, 4), dtype=bool)) if causal else allowed)
    scores = (tq @ tk.transpose(-2, -1) / np.sqrt(8)).masked_fill(~keep, float("-inf"))
    tout = torch.softmax(scores, -1) @ tv
    assert weights.shape == (2, 3, 4, 4) and weights.grad_fn is None
    np.testing.assert_allclose(weights.sum(-1).numpy(), np.ones((2, 3, 4)), atol=1e-12)
    check(out, tout, [q, k, v], [tq, tk, tv])


def test_dropout_in_training_and_not():
    x = ember.ones(1000, dtype=ember.float64)
    y = F.dropout(x, 0.25, training=True, generator=ember.Generator(1))
    kept = (y != 0).sum().item()
    assert 650 < kept < 850
    assert np.allclose(y.numpy()[y.numpy() != 0], 1 / 0.75)
    assert ember.equal(F.dropout(x, 0.25, training=False), x)
