"""Autograd from Python: gradients against PyTorch's in float64, backward's and grad's
arguments, retain_grad, hooks written in Python (one that raises too), grad mode."""

import sys

import numpy as np
import pytest

import ember

try:
    import torch
except ImportError:  # only the comparisons with PyTorch need it
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

RNG = np.random.default_rng(1)
X = RNG.standard_normal((3, 4))
W = RNG.standard_normal((5, 4))
G = RNG.standard_normal((3, 5))  # a non-uniform upstream weight


def graph(lib, x, w, g):
    y = lib.softmax(lib.matmul(x, w.t()) / 2.0, -1)
    return (y * g).sum()


@needs_torch
def test_gradients_match_pytorch_in_float64():
    x = ember.tensor(X.tolist(), dtype=ember.float64, requires_grad=True)
    w = ember.tensor(W.tolist(), dtype=ember.float64, requires_grad=True)
    loss = graph(ember, x, w, ember.tensor(G.tolist(), dtype=ember.float64))
    loss.backward()
    tx = torch.tensor(X, requires_grad=True)
    tw = torch.tensor(W, requires_grad=True)
    tloss = graph(torch, tx, tw, torch.tensor(G))
    tloss.backward()
    assert abs(loss.item() - tloss.item()) < 1e-12
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=0, atol=1e-12)


@needs_torch
def test_autograd_grad_matches_pytorch_and_leaves_grad_alone():
    x = ember.tensor(X.tolist(), dtype=ember.float64, requires_grad=True)
    w = ember.tensor(W.tolist(), dtype=ember.float64, requires_grad=True)
    y = ember.softmax(x @ w.t(), -1)
    g = ember.tensor(G.tolist(), dtype=ember.float64)
    dx, dw = ember.autograd.grad(y, (x, w), grad_outputs=g)
    assert x.grad is None
    tx, tw = torch.tensor(X, requires_grad=True), torch.tensor(W, requires_grad=True)
    tdx, tdw = torch.autograd.grad(torch.softmax(tx @ tw.t(), -1), (tx, tw), grad_outputs=torch.tensor(G))
    np.testing.assert_allclose(dx.numpy(), tdx.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(dw.numpy(), tdw.numpy(), rtol=0, atol=1e-12)


def test_grad_with_create_graph_differentiates_twice():
    x = ember.tensor([1.5, -0.5], dtype=ember.float64, requires_grad=True)
    (dx,) = ember.autograd.grad((x ** 3).sum(), [x], create_graph=True)
    assert dx.tolist() == [3 * 1.5 ** 2, 3 * 0.25]
    (ddx,) = ember.autograd.grad(dx.sum(), x)
    assert ddx.tolist() == [6 * 1.5, 6 * -0.5]


def test_unused_inputs():
    x = ember.ones(2, requires_grad=True)
    u = ember.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        ember.autograd.grad((x * 2).sum(), [x, u])
    dx, du = ember.autograd.grad((x * 2).sum(), [x, u], allow_unused=True)
    assert dx.tolist() == [2.0, 2.0] and du is None


def test_backward_arguments_and_retain_grad():
    x = ember.ones(3, requires_grad=True)
    y = x * 3
    y.retain_grad()
    assert y.retains_grad
    y.backward(ember.tensor([1.0, 2.0, 3.0]), retain_graph=True)
    assert x.grad.tolist() == [3.0, 6.0, 9.0] and y.grad.tolist() == [1.0, 2.0, 3.0]
    y.backward(gradient=ember.ones(3))
    assert x.grad.tolist() == [6.0, 9.0, 12.0]
    with pytest.raises(RuntimeError, match="second time"):
        y.backward(ember.ones(3))
    x.grad = None
    assert x.grad is None


def test_a_python_hook_sees_and_replaces_the_gradient():
    x = ember.ones(2, requires_grad=True)
    y = x * 2
    seen = []
    y.register_hook(lambda g: seen.append(g.tolist()))
    handle = x.register_hook(lambda g: g * 10)
    y.sum().backward()
    assert seen == [[1.0, 1.0]] and x.grad.tolist() == [20.0, 20.0]
    handle.remove()
    x.grad = None
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


class HookFailed(Exception):
    pass


def test_an_exception_in_a_hook_reaches_the_caller_and_the_engine_goes_on():
    x = ember.ones(2, requires_grad=True)
    y = x * 2

    def fail(g):
        raise HookFailed("from the hook")

    y.register_hook(fail)
    with pytest.raises(HookFailed, match="from the hook"):
        y.sum().backward()
    z = (x * 5).sum()
    z.backward()
    assert x.grad.tolist() == [5.0, 5.0]
    assert ember.is_grad_enabled()


def test_a_hook_returning_something_else_is_a_type_error():
    x = ember.ones(2, requires_grad=True)
    x.register_hook(lambda g: "no")
    with pytest.raises(TypeError, match="must return None or a Tensor"):
        (x * 1).sum().backward()


def test_no_grad_and_enable_grad():
    x = ember.ones(2, requires_grad=True)
    with ember.no_grad():
        assert not ember.is_grad_enabled()
        y = x * 2
        with ember.enable_grad():
            assert (x * 2).requires_grad
    assert ember.is_grad_enabled() and not y.requires_grad and y.grad_fn is None

    @ember.no_grad()
    def f():
        return x * 2

    assert not f().requires_grad
    with ember.set_grad_enabled(False):
        assert not ember.is_grad_enabled()
    assert ember.is_grad_enabled()


def test_in_place_update_under_no_grad_as_an_optimizer_does():
    w = ember.ones(2, requires_grad=True)
    (w * 3).sum().backward()
    with ember.no_grad():
        w -= 0.5 * w.grad
    assert w.tolist() == [-0.5, -0.5] and w.is_leaf and w.requires_grad


def test_a_hook_is_released_with_its_graph():
    def hook(g):
        return None

    before = sys.getrefcount(hook)
    x = ember.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(hook)
    assert sys.getrefcount(hook) == before + 1
    y.sum().backward()
    del y
    assert sys.getrefcount(hook) == before
