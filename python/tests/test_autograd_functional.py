"""ember.autograd.functional against PyTorch's in float64; gradcheck's report; anomaly
mode as a context manager."""

import numpy as np
import pytest

import ember
from ember.autograd import functional as F

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

RNG = np.random.default_rng(5)
X = RNG.standard_normal((3,))
Y = RNG.standard_normal((2, 3))
V = RNG.standard_normal((3,))
W = RNG.standard_normal((2, 3))


def f64(a, requires_grad=False):
    return ember.tensor(np.asarray(a).tolist(), dtype=ember.float64, requires_grad=requires_grad)


def close(e, t):
    np.testing.assert_allclose(e.numpy(), t.detach().numpy(), rtol=0, atol=1e-12)


def vec_fn(lib):
    return lambda x: lib.tanh(x) * x.sum()


def scalar2(lib):
    return lambda x, y: (lib.sin(x) * (y * y).sum(0)).sum()


@needs_torch
def test_jacobian_of_one_and_of_two_inputs():
    close(F.jacobian(vec_fn(ember), f64(X)),
          torch.autograd.functional.jacobian(vec_fn(torch), torch.tensor(X)))
    f = lambda lib: (lambda x, y: lib.exp(x) * y)  # noqa: E731
    e = F.jacobian(f(ember), (f64(X), f64(Y)))
    t = torch.autograd.functional.jacobian(f(torch), (torch.tensor(X), torch.tensor(Y)))
    assert isinstance(e, tuple) and len(e) == 2
    close(e[0], t[0])
    close(e[1], t[1])


@needs_torch
def test_hessian_blocks_as_pytorch():
    e = F.hessian(scalar2(ember), (f64(X), f64(Y)))
    t = torch.autograd.functional.hessian(scalar2(torch), (torch.tensor(X), torch.tensor(Y)))
    for a in range(2):
        for b in range(2):
            close(e[a][b], t[a][b])
    one = lambda lib: (lambda x: (x ** 3).sum())  # noqa: E731
    close(F.hessian(one(ember), f64(X)), torch.autograd.functional.hessian(one(torch), torch.tensor(X)))


@needs_torch
def test_vjp_jvp_hvp():
    out, g = F.vjp(vec_fn(ember), f64(X), f64(V))
    tout, tg = torch.autograd.functional.vjp(vec_fn(torch), torch.tensor(X), torch.tensor(V))
    close(out, tout)
    close(g, tg)
    out, jv = F.jvp(vec_fn(ember), f64(X), f64(V))
    _, tjv = torch.autograd.functional.jvp(vec_fn(torch), torch.tensor(X), torch.tensor(V))
    close(jv, tjv)
    out, hv = F.hvp(scalar2(ember), (f64(X), f64(Y)), (f64(V), f64(W)))
    _, thv = torch.autograd.functional.hvp(scalar2(torch), (torch.tensor(X), torch.tensor(Y)),
                                           (torch.tensor(V), torch.tensor(W)))
    close(hv[0], thv[0])
    close(hv[1], thv[1])


def test_vjp_of_a_scalar_needs_no_v_and_leaves_the_point_alone():
    x = f64(X, requires_grad=True)
    out, g = F.vjp(lambda x: (x * x).sum(), x)
    np.testing.assert_allclose(g.numpy(), 2 * X, atol=1e-15)
    assert x.grad is None and g.grad_fn is None


def test_a_function_returning_something_else_is_a_type_error():
    with pytest.raises(TypeError, match="jacobian: the function must return one Tensor"):
        F.jacobian(lambda x: 1.0, f64(X))


def test_gradcheck_returns_a_printable_report():
    x = f64(Y, requires_grad=True)
    report = ember.autograd.gradcheck(lambda x: ember.softmax(x, -1), [x], names=["x"])
    assert report.passed and bool(report) and report.order == 1
    assert report.inputs[0].name == "x" and report.inputs[0].shape == (2, 3)
    assert "x" in str(report)
    assert ember.autograd.gradgradcheck(lambda x: ember.softmax(x, -1), x).passed


def test_gradcheck_reports_a_wrong_gradient():
    class Wrong(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, grad):
            return grad  # should be 2 x grad

    report = ember.autograd.gradcheck(Wrong.apply, [f64(Y, requires_grad=True)])
    assert not report.passed and report.inputs[0].max_abs_err > 0.1


def test_detect_anomaly_is_a_context_manager():
    assert not ember.autograd.is_anomaly_enabled()
    x = f64([0.0, 1.0], requires_grad=True)
    with ember.autograd.detect_anomaly():
        assert ember.autograd.is_anomaly_enabled()
        with pytest.raises(RuntimeError, match="log"):
            (ember.log(x) * 0.0).sum().backward()
    assert not ember.autograd.is_anomaly_enabled()
    with ember.autograd.set_detect_anomaly(True):
        assert ember.autograd.is_anomaly_enabled()
    assert not ember.autograd.is_anomaly_enabled()
