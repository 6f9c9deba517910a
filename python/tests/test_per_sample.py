"""ember.func.per_sample_grads from Python: a Python model of ember's layers, against one
backward pass per example (its definition), in float64."""

import numpy as np
import pytest

import ember
from ember import nn


class Tagger(nn.Module):
    """Embedding, an encoder layer (attention, layer norms, feed-forward) and a Linear head."""

    def __init__(self):
        super().__init__()
        g = ember.Generator(4)
        self.dropout_gen = ember.Generator(5)
        self.embed = nn.Embedding(10, 8, padding_idx=0, generator=g, dtype=ember.float64)
        self.layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.1, generator=g,
                                                dropout_generator=self.dropout_gen, dtype=ember.float64)
        self.head = nn.Linear(8, 3, generator=g, dtype=ember.float64)

    def forward(self, ids):
        return self.head(self.layer(self.embed(ids), src_key_padding_mask=ids == 0))


IDS = ember.tensor([[3, 4, 5, 0], [6, 2, 0, 0], [7, 8, 9, 1]])
TARGETS = ember.tensor([[0, 1, 2, -1], [2, 2, -1, -1], [1, 0, 1, 2]])


def losses(model):
    def run():
        model.dropout_gen.manual_seed(5)  # the same dropout masks in every forward
        logits = model(IDS)
        return ember.stack([nn.functional.cross_entropy(logits[b], TARGETS[b], ignore_index=-1)
                            for b in range(3)])
    return run


@pytest.mark.parametrize("training", [False, True])
def test_per_sample_grads_equal_one_backward_per_example(training):
    model = Tagger()
    model.train(training)
    fast = ember.func.per_sample_grads(model, 3, losses(model))
    names = [n for n, _ in model.named_parameters()]
    assert list(fast) == names
    L = losses(model)()
    params = [p for _, p in model.named_parameters()]
    for b in range(3):
        grads = ember.autograd.grad(L[b], params, retain_graph=True, allow_unused=True)
        for name, p, g in zip(names, params, grads):
            expected = np.zeros(p.shape) if g is None else g.numpy()
            np.testing.assert_allclose(fast[name][b].numpy(), expected, rtol=0,
                                       atol=1e-12 * max(1.0, np.abs(expected).max()), err_msg=name)
    assert all(p.grad is None for p in params)


def test_per_sample_grads_refuses_python_parameters_and_bad_losses():
    class WithOwn(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(ember.ones(1))
            self.head = nn.Linear(2, 2)

    with pytest.raises(ValueError, match="parameter 'scale' is a Python Parameter"):
        ember.func.per_sample_grads(WithOwn(), 2, lambda: ember.zeros(2))
    model = Tagger()
    with pytest.raises(TypeError, match="the losses function must return a Tensor"):
        ember.func.per_sample_grads(model, 3, lambda: 1.0)
    with pytest.raises(RuntimeError, match=r"expected the losses function to return the 3 examples' losses"):
        ember.func.per_sample_grads(model, 3, lambda: model(IDS).sum())


def test_norms_clipping_and_noise_from_python():
    model = Tagger()
    model.eval()
    grads = ember.func.per_sample_grads(model, 3, losses(model))
    flat = np.concatenate([g.numpy().reshape(3, -1) for g in grads.values()], axis=1)
    np.testing.assert_allclose(ember.func.per_sample_norms(grads).numpy(), np.linalg.norm(flat, axis=1), rtol=1e-12)
    clipped = ember.func.clipped_mean(grads, 0.5)
    factor = np.minimum(1.0, 0.5 / np.linalg.norm(flat, axis=1))
    np.testing.assert_allclose(np.concatenate([c.numpy().reshape(-1) for c in clipped.values()]),
                               (flat * factor[:, None]).mean(0), rtol=1e-12, atol=1e-15)
    noise = ember.func.gradient_noise(grads)
    m = flat.mean(0)
    S = ((flat - m) ** 2).sum() / 2
    assert noise["batch"] == 3 and noise["parameters"] == flat.shape[1]
    np.testing.assert_allclose([noise["mean_norm_sq"], noise["trace_cov"], noise["signal"]],
                               [m @ m, S, m @ m - S / 3], rtol=1e-12)
    assert ember.func.gradient_noise(grads, "head.")["parameters"] == 8 * 3 + 3


def test_per_sample_grads_hostile_calls_fail_by_name():
    model = Tagger()
    model.eval()
    for bad, kind in ((4.0, TypeError), (None, TypeError), (0, ValueError), (-3, ValueError)):
        with pytest.raises(kind, match="per_sample_grads: batch_size"):
            ember.func.per_sample_grads(model, bad, losses(model))
    # from inside its own losses function
    def nested():
        ember.func.per_sample_grads(model, 3, losses(model))
        return losses(model)()
    with pytest.raises(RuntimeError, match="called again from inside its losses function"):
        ember.func.per_sample_grads(model, 3, nested)
    # examples mixed so that each row's weights average to a whole number: still refused
    lin = nn.Linear(3, 2, dtype=ember.float64)
    x = ember.randn(4, 3, dtype=ember.float64)

    def rolled():
        h = lin(x)
        return (h + ember.cat([h[2:], h[:2]], 0)).sum(1)

    with pytest.raises(RuntimeError, match="mixes examples"):
        ember.func.per_sample_grads(lin, 4, rolled)
    with pytest.raises(RuntimeError, match="mixes examples"):
        ember.func.per_sample_grads(lin, 3, lambda: (lin(x[:3]) ** 2).sum().expand(3))
    # NaN in the data: named
    bad_x = ember.tensor([[1.0, float("nan"), 0.0], [0.0, 1.0, 2.0]], dtype=ember.float64)
    with pytest.raises(RuntimeError, match="holds NaN or Inf"):
        ember.func.per_sample_grads(lin, 2, lambda: (lin(bad_x) ** 2).sum(1))


def test_per_sample_grads_ignores_other_threads_forwards():
    import threading
    lin = nn.Linear(64, 64, dtype=ember.float64)
    x = ember.randn(32, 64, dtype=ember.float64)
    stop = []

    def spin():
        while not stop:
            lin(x)

    threads = [threading.Thread(target=spin) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(100):
            g = ember.func.per_sample_grads(lin, 2, lambda: (lin(x[:2]) ** 2).sum(1))
            assert g["weight"].shape == (2, 64, 64)
    finally:
        stop.append(True)
        for t in threads:
            t.join()
