"""Custom autograd Functions written in Python: forward and backward, the context,
non-tensor arguments, double backward, exceptions, and ember's checks of what backward
returns."""

import numpy as np
import pytest

import ember
from ember.autograd import Function

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

RNG = np.random.default_rng(3)
X = RNG.standard_normal((3, 4))
G = RNG.standard_normal((3, 4))


def f64(a, requires_grad=False):
    return ember.tensor(np.asarray(a).tolist(), dtype=ember.float64, requires_grad=requires_grad)


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3.0 * x ** 2


class ScaledMul(Function):
    """a * b * scale, with a Python number among the arguments and an attribute on ctx."""

    @staticmethod
    def forward(ctx, a, scale, b):
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        return a * b * scale

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b * ctx.scale, None, grad * a * ctx.scale


@needs_torch
def test_a_python_function_matches_pytorch():
    x = f64(X, requires_grad=True)
    (Cube.apply(x) * f64(G)).sum().backward()
    tx = torch.tensor(X, requires_grad=True)
    ((tx ** 3) * torch.tensor(G)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=0, atol=1e-12)


def test_context_attributes_non_tensor_arguments_and_needs_input_grad():
    a = f64(X, requires_grad=True)
    b = f64(G)
    seen = {}

    class Probe(ScaledMul):
        @staticmethod
        def forward(ctx, a, scale, b):
            seen["needs"] = ctx.needs_input_grad
            return ScaledMul.forward(ctx, a, scale, b)

    y = Probe.apply(a, 2.5, b)
    assert seen["needs"] == (True, False, False)
    assert y.grad_fn.name() == "Probe"
    y.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), G * 2.5, rtol=0, atol=1e-15)


def test_double_backward_through_a_python_backward():
    x = f64([1.5, -0.5, 2.0], requires_grad=True)
    (dx,) = ember.autograd.grad(Cube.apply(x).sum(), [x], create_graph=True)
    (ddx,) = ember.autograd.grad(dx.sum(), [x])
    np.testing.assert_allclose(dx.detach().numpy(), 3 * np.array([1.5, -0.5, 2.0]) ** 2, atol=1e-14)
    np.testing.assert_allclose(ddx.numpy(), 6 * np.array([1.5, -0.5, 2.0]), atol=1e-14)
    assert ember.autograd.gradgradcheck(Cube.apply, [f64(X, requires_grad=True)]).passed


def test_without_grad_no_node_is_recorded():
    y = Cube.apply(f64(X))
    assert y.grad_fn is None and not y.requires_grad


class Boom(Exception):
    pass


def test_an_exception_in_forward_reaches_the_caller():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x):
            raise Boom("in forward")

    with pytest.raises(Boom, match="in forward"):
        Bad.apply(f64(X, requires_grad=True))
    assert ember.is_grad_enabled()  # forward's no-grad scope was left


def test_an_exception_in_backward_reaches_the_caller_and_the_engine_goes_on():
    class Bad(Cube):
        @staticmethod
        def backward(ctx, grad):
            raise Boom("in backward")

    x = f64(X, requires_grad=True)
    with pytest.raises(Boom, match="in backward"):
        Bad.apply(x).sum().backward()
    Cube.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * X ** 2, atol=1e-14)


def test_a_wrong_number_of_gradients_is_embers_error():
    class TwoGrads(Cube):
        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    x = f64(X, requires_grad=True)  # held: a leaf no one holds gets no gradient computed
    with pytest.raises(RuntimeError, match="TwoGrads: backward returned 2 gradients; expected 1"):
        TwoGrads.apply(x).sum().backward()


def test_a_gradient_of_the_wrong_shape_is_embers_error():
    class WrongShape(Cube):
        @staticmethod
        def backward(ctx, grad):
            return grad.sum(0)

    x = f64(X, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"WrongShape: backward returned a gradient of shape \[4\]"):
        WrongShape.apply(x).sum().backward()


def test_forward_must_return_tensors():
    class Listed(Function):
        @staticmethod
        def forward(ctx, x):
            return [x, x]

    with pytest.raises(TypeError, match="Listed.forward must return a Tensor or a tuple of Tensors, got list"):
        Listed.apply(f64(X, requires_grad=True))

    class Mixed(Function):
        @staticmethod
        def forward(ctx, x):
            return x, 3

    with pytest.raises(TypeError, match="Mixed.forward must return Tensors, got int at position 1"):
        Mixed.apply(f64(X, requires_grad=True))

    class TwoDtypes(Function):
        @staticmethod
        def forward(ctx, x):
            return x, x.float()

    with pytest.raises(TypeError, match="must share a dtype; output 1 is ember.float32, the ones before ember.float64"):
        TwoDtypes.apply(f64(X, requires_grad=True))


def test_saved_tensors_outside_forward_and_backward_is_an_error():
    ctx = ember.autograd.FunctionCtx()
    with pytest.raises(RuntimeError, match="inside forward or backward"):
        ctx.saved_tensors


def test_the_context_is_released_with_the_graph():
    import gc
    import weakref

    refs = []

    class Kept(Cube):
        @staticmethod
        def forward(ctx, x):
            refs.append(weakref.ref(ctx))
            return Cube.forward(ctx, x)

    y = Kept.apply(f64(X, requires_grad=True))
    gc.collect()
    assert refs[0]() is not None  # the node holds it for backward
    del y
    gc.collect()
    assert refs[0]() is None


def test_gradcheck_of_a_function_with_a_number_argument():
    a, b = f64(X, requires_grad=True), f64(G, requires_grad=True)
    assert ember.autograd.gradcheck(lambda a, b: ScaledMul.apply(a, 0.5, b), [a, b]).passed


class SinCos(Function):
    """Two outputs; backward takes a gradient for each."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ember.sin(x), ember.cos(x)

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        return gs * ember.cos(x) - gc * ember.sin(x)


class ExpAndSquare(Function):
    """Saves one of its outputs: a double backward must flow through it."""

    @staticmethod
    def forward(ctx, x):
        e = ember.exp(x)
        ctx.save_for_backward(x, e)
        return e, x * x

    @staticmethod
    def backward(ctx, ge, gsq):
        x, e = ctx.saved_tensors
        return ge * e + gsq * 2.0 * x


class MaxWithIndex(Function):
    """A float output and an int64 one, marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        values, indices = ember.max(x, dim=1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, gv, gi):
        (indices,) = ctx.saved_tensors
        assert gi.dtype == ember.int64 and gi.tolist() == [0] * len(gi.tolist())
        out = ember.zeros(*ctx.shape, dtype=gv.dtype)
        for r, c in enumerate(indices.tolist()):
            out[r, c] = gv[r].item()
        return out


def test_multiple_outputs_get_their_gradients():
    x = f64(X, requires_grad=True)
    s, c = SinCos.apply(x)
    assert s.grad_fn is not None and ember.allclose(s, ember.sin(x)) and ember.allclose(c, ember.cos(x))
    (s * f64(G) + c * f64(G) ** 2).sum().backward()
    want = np.cos(X) * G - np.sin(X) * G ** 2
    assert np.allclose(x.grad.numpy(), want, rtol=1e-14, atol=1e-15)
    # an output not used gets zeros
    x2 = f64(X, requires_grad=True)
    (SinCos.apply(x2)[1] * f64(G)).sum().backward()
    assert np.allclose(x2.grad.numpy(), -np.sin(X) * G, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("contiguous", [True, False])
def test_multiple_outputs_to_second_order(contiguous):
    x = f64(X if contiguous else X.T, requires_grad=True)
    if not contiguous:
        x = f64(X.T).t().requires_grad_()  # a non-contiguous leaf
    w1, w2 = f64(G if contiguous else G), f64(G[::-1].copy())

    def f(t):
        a, b = ExpAndSquare.apply(t)
        return a * w1 + b * w2

    assert ember.autograd.gradcheck(f, [x]).passed
    assert ember.autograd.gradgradcheck(f, [x]).passed
    e, sq = ExpAndSquare.apply(x)
    (gx,) = ember.autograd.grad((e * w1).sum(), (x,), create_graph=True)
    (ggx,) = ember.autograd.grad(gx.sum(), (x,))
    assert np.allclose(ggx.numpy(), np.exp(x.detach().numpy()) * G, rtol=1e-14)  # through the saved output


def test_non_differentiable_outputs():
    x = f64(X, requires_grad=True)
    values, indices = MaxWithIndex.apply(x)
    assert indices.dtype == ember.int64 and indices.grad_fn is None and not indices.requires_grad
    assert indices.tolist() == X.argmax(1).tolist()
    (values * f64(G[:, 0])).sum().backward()
    want = np.zeros_like(X)
    want[np.arange(3), X.argmax(1)] = G[:, 0]
    assert np.array_equal(x.grad.numpy(), want)


def test_a_one_tuple_is_a_tuple():
    class One(Function):
        @staticmethod
        def forward(ctx, x):
            return (x * 2.0,)

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    x = f64(X, requires_grad=True)
    (y,) = One.apply(x)
    y.sum().backward()
    assert x.grad.tolist() == np.full_like(X, 2.0).tolist()
