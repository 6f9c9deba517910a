"""ember.curvature: the loss Hessian over parameter sets, against PyTorch's dense Hessian of
the same function (torch.autograd.functional.hessian) and NumPy's eigvalsh; heads of a
MultiheadAttention found by path in C++ layers and Python modules; operators in Python."""

import math

import numpy as np
import pytest

import ember
import ember.nn as nn

torch = pytest.importorskip("torch")


def attention_loss(lib, x, w, heads):
    """A one-layer attention loss of the weights w (dict of 4 [E, E] matrices) in either library."""
    B, L, E = x.shape
    d = E // heads

    def split(t):
        return t.reshape(B, L, heads, d).transpose(1, 2)

    q, k, v = split(x @ w["wq"].t()), split(x @ w["wk"].t()), split(x @ w["wv"].t())
    p = lib.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), -1)
    o = (p @ v).transpose(1, 2).reshape(B, L, E) @ w["wo"].t()
    return (o * o).sum() / B


def test_the_hessian_eigenvalues_trace_and_blocks_match_pytorchs_dense_hessian():
    rng = np.random.default_rng(0)
    E, H = 8, 2
    x_np = rng.standard_normal((2, 5, E))
    w_np = {n: rng.standard_normal((E, E)) * 0.5 for n in ("wq", "wk", "wv", "wo")}
    x = ember.tensor(x_np)
    w = {n: ember.tensor(a).requires_grad_() for n, a in w_np.items()}
    h = ember.curvature.LossHessian(lambda: attention_loss(ember, x, w, H), w)

    xt = torch.tensor(x_np)
    names = list(w_np)

    def f(*ws):
        return attention_loss(torch, xt, dict(zip(names, ws)), H)

    blocks = torch.autograd.functional.hessian(f, tuple(torch.tensor(w_np[n]) for n in names))
    n = 4 * E * E
    dense = np.block([[blocks[a][b].reshape(E * E, E * E).numpy() for b in range(4)] for a in range(4)])
    assert h.loss == pytest.approx(f(*(torch.tensor(w_np[n]) for n in names)).item(), rel=1e-12)
    assert ember.curvature.numel(w) == n
    np.testing.assert_allclose(h.dense(), dense, rtol=0, atol=1e-10 * np.abs(dense).max())

    values = np.linalg.eigvalsh(dense)
    top = h.top_eigen(k=2, tol=1e-10)
    assert top.converged
    np.testing.assert_allclose(top.values, values[::-1][:2], rtol=1e-6)
    assert abs(np.dot(top.vectors[0], dense @ top.vectors[0]) - values[-1]) < 1e-6 * abs(values[-1])
    mag = h.top_eigen(order="magnitude", tol=1e-10)
    assert abs(mag.values[0]) == pytest.approx(np.abs(values).max(), rel=1e-6)

    t = h.trace(probes=200, seed=3)
    assert abs(t.value - np.trace(dense)) < 4 * t.std_error
    assert t.probes == 200

    # a subset: Wq and Wk rows of head 1 (rows d..2d of each), its dense block and top eigenvalue
    d = E // H
    part = [("wq", w["wq"], 0, d, d), ("wk", w["wk"], 0, d, d)]
    idx = np.concatenate([np.arange(d * E, 2 * d * E), E * E + np.arange(d * E, 2 * d * E)])
    sub = dense[np.ix_(idx, idx)]
    np.testing.assert_allclose(h.dense(part), sub, rtol=0, atol=1e-10 * np.abs(dense).max())
    assert h.top_eigen(params=part, tol=1e-10).values[0] == pytest.approx(np.linalg.eigvalsh(sub)[-1], rel=1e-6)
    v = rng.standard_normal(len(idx))
    np.testing.assert_allclose(h.hvp(v, params=part), sub @ v, rtol=0, atol=1e-10 * np.abs(sub).max())

    # every set's trace from the same products
    traces = h.trace_blocks([{"wq": w["wq"]}, {"wv": w["wv"]}], probes=300, seed=1)
    for tr, (lo, hi) in zip(traces, [(0, E * E), (2 * E * E, 3 * E * E)]):
        assert abs(tr.value - np.trace(dense[lo:hi, lo:hi])) < 4 * tr.std_error

    # the density: its trace is Hutchinson's on the same sign vectors, its nodes within the spectrum
    dens = h.density(steps=20, probes=3, seed=5)
    assert dens.trace() == pytest.approx(h.trace(probes=3, seed=5).value, rel=1e-8)
    lo, hi = dens.range()
    assert values[0] - 1e-8 <= lo and hi <= values[-1] + 1e-8
    assert dens.at(0.0, 0.1 * (hi - lo)) > 0


def test_head_parameters_by_path_in_cpp_layers_and_python_modules():
    g = ember.Generator(1)
    mha = nn.MultiheadAttention(16, 4, generator=g, dtype=ember.float64)
    parts = ember.curvature.head_parameters(mha, "", 2)
    assert [p[0] for p in parts] == ["q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                                     "v_proj.weight", "v_proj.bias", "out_proj.weight"]
    assert [(p[2], p[3], p[4]) for p in parts] == [(0, 8, 4)] * 6 + [(1, 8, 4)]
    assert ember.curvature.numel(parts) == 3 * (4 * 16 + 4) + 16 * 4

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 4, generator=g, dtype=ember.float64)
            self.proj = nn.Linear(16, 16, dtype=ember.float64)

        def forward(self, x):
            return self.proj(self.attn(x, x, x)[0])

    block = Block()
    parts = ember.curvature.head_parameters(block, "attn", 0)
    assert parts[0][0] == "attn.q_proj.weight"
    assert parts[0][1] is not None and hash(parts[0][1]) == hash(block.attn.q_proj.weight)
    x = ember.randn(2, 3, 16, dtype=ember.float64, generator=g)
    h = ember.curvature.LossHessian(lambda: (block(x) ** 2).sum(), block)
    assert h.top_eigen(params=parts).values[0] > 0
    with pytest.raises(ValueError, match="head_parameters: 'proj' is not a MultiheadAttention of the model"):
        ember.curvature.head_parameters(block, "proj", 0)
    with pytest.raises(RuntimeError, match=r"head_parameters: expected a head in \[0, 4\), got 4"):
        ember.curvature.head_parameters(block, "attn", 4)


def test_operators_written_in_python_and_errors_by_name():
    a = np.diag(np.arange(1.0, 11.0))
    a[0, 1] = a[1, 0] = 0.5
    top = ember.curvature.top_eigen(lambda v: a @ v, 10, k=2)
    np.testing.assert_allclose(top.values, np.linalg.eigvalsh(a)[::-1][:2], rtol=1e-9)
    diag = np.arange(1.0, 11.0)  # z^T D z is the trace for every sign vector z
    assert ember.curvature.hutchinson(lambda v: diag * v, 10, probes=4).value == pytest.approx(diag.sum())
    assert ember.curvature.spectral_density(lambda v: diag * v, 10, steps=10, probes=2).trace() == pytest.approx(diag.sum())

    with pytest.raises(RuntimeError, match="top_eigen: the operator returned a vector of length 3 for one of length 10"):
        ember.curvature.top_eigen(lambda v: np.zeros(3), 10)
    with pytest.raises(RuntimeError, match="top_eigen: the operator must return a vector of numbers, got str"):
        ember.curvature.top_eigen(lambda v: "no", 10)
    with pytest.raises(ZeroDivisionError):
        ember.curvature.hutchinson(lambda v: 1 / 0, 10)
    with pytest.raises(RuntimeError, match=r"top_eigen: expected 1 <= k <= n \(10\), got k = 11"):
        ember.curvature.top_eigen(lambda v: a @ v, 10, k=11)
    with pytest.raises(RuntimeError, match='expected order "largest" or "magnitude", got "smallest"'):
        ember.curvature.top_eigen(lambda v: a @ v, 10, order="smallest")
    with pytest.raises(ValueError, match=r"hutchinson: seed must be in \[0, 2\*\*64\), got -1"):
        ember.curvature.hutchinson(lambda v: a @ v, 10, seed=-1)
    with pytest.raises(TypeError, match="top_eigen: k must be an int, got float"):
        ember.curvature.top_eigen(lambda v: a @ v, 10, k=1.5)

    w = ember.randn(3, 3, dtype=ember.float64).requires_grad_()
    with pytest.raises(TypeError, match="LossHessian: the loss function must return a Tensor, got float"):
        ember.curvature.LossHessian(lambda: 1.0, {"w": w})
    with pytest.raises(RuntimeError, match="LossHessian: expected loss\\(\\) to return a one-element float tensor"):
        ember.curvature.LossHessian(lambda: w * 2, {"w": w})
    with pytest.raises(TypeError, match="LossHessian: loss must be callable, got int"):
        ember.curvature.LossHessian(3, {"w": w})
    with pytest.raises(ValueError, match="LossHessian: expected at least one parameter, got none"):
        ember.curvature.LossHessian(lambda: (w * w).sum(), {})
    h = ember.curvature.LossHessian(lambda: (w * w * w).sum(), {"w": w})
    with pytest.raises(IndexError, match="out of range for a parameter of shape"):
        h.dense([("w", w, 0, 2, 5)])
    with pytest.raises(RuntimeError, match="LossHessian: expected a vector of length 9, got 2"):
        h.hvp([1.0, 2.0])
    np.testing.assert_allclose(h.dense(), np.diag(6 * w.detach().numpy().reshape(-1)), atol=1e-12)
