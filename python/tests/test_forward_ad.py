"""Forward mode from Python: ember.autograd.forward_ad's dual tensors and ember.func's
transforms, against torch.autograd.forward_ad and torch.func in float64."""

import numpy as np
import pytest

import ember
from ember.autograd import forward_ad as fwAD

torch = pytest.importorskip("torch")
import torch.autograd.forward_ad as tfwAD  # noqa: E402

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4))
W = RNG.standard_normal((4, 5))
VX = RNG.standard_normal((3, 4))
VW = RNG.standard_normal((4, 5))


def f64(a, requires_grad=False):
    return ember.tensor(np.asarray(a).tolist(), dtype=ember.float64, requires_grad=requires_grad)


def close(e, t, tol=1e-12):
    np.testing.assert_allclose(e.detach().numpy(), t.detach().numpy(), rtol=0, atol=tol)


def net(lib):
    """A vector-valued function of two inputs through matmul, tanh, softmax, reductions."""
    return lambda x, w: lib.softmax(lib.tanh(x @ w) * 1.5, -1) * x.sum(1, keepdim=True)


def loss(lib):
    return lambda x, w: (net(lib)(x, w) ** 2).sum() + (lib.exp(x * 0.3)).sum()


def test_dual_tensors_match_torch_forward_ad():
    with fwAD.dual_level() as level:
        assert isinstance(level, int)
        x = fwAD.make_dual(f64(X), f64(VX))
        y = net(ember)(x, f64(W))
        primal, tangent = fwAD.unpack_dual(y)
        assert fwAD.unpack_dual(f64(W)).tangent is None
    with tfwAD.dual_level():
        ty = net(torch)(tfwAD.make_dual(torch.tensor(X), torch.tensor(VX)), torch.tensor(W))
        tp, tt = tfwAD.unpack_dual(ty)
    close(primal, tp)
    close(tangent, tt)
    # the tangent vanished with the level
    assert fwAD.unpack_dual(y).tangent is None


def test_one_level_at_a_time_and_errors_name_the_call():
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="nested dual levels are not supported"):
            fwAD.enter_dual_level()
        with pytest.raises(RuntimeError, match=r"make_dual: expected a tangent of the primal's shape \[3,4\]"):
            fwAD.make_dual(f64(X), f64(W))
    with pytest.raises(RuntimeError, match="make_dual: no dual level is open"):
        fwAD.make_dual(f64(X), f64(VX))
    with pytest.raises(RuntimeError, match="exit_dual_level: no dual level is open"):
        fwAD.exit_dual_level()
    level = fwAD.enter_dual_level()
    with pytest.raises(RuntimeError, match="expected the open level"):
        fwAD.exit_dual_level(level=level + 1)
    fwAD.exit_dual_level(level=level)
    with pytest.raises(TypeError):
        fwAD.make_dual(f64(X), "v")


def test_forward_over_reverse_inside_a_level_gives_hessian_vector_products():
    x, w = f64(X, True), f64(W, True)
    with fwAD.dual_level():
        y = loss(ember)(fwAD.make_dual(x, f64(VX)), fwAD.make_dual(w, f64(VW)))
        with pytest.raises(RuntimeError, match="plain backward pass through the tangents"):
            ember.autograd.grad(y, (x, w), retain_graph=True)
        gx, gw = ember.autograd.grad(y, (x, w), create_graph=True)
        hx, hw = fwAD.unpack_dual(gx).tangent, fwAD.unpack_dual(gw).tangent
    _, (tx, tw) = torch.autograd.functional.hvp(loss(torch), (torch.tensor(X), torch.tensor(W)),
                                                (torch.tensor(VX), torch.tensor(VW)))
    close(hx, tx)
    close(hw, tw)


def test_func_transforms_match_torch():
    # torch.func is not in PyTorch 1.13: its forward-mode and functional equivalents
    x, w = f64(X), f64(W)
    tx, tw = torch.tensor(X), torch.tensor(W)
    out, jv = ember.func.jvp(net(ember), (x, w), (f64(VX), f64(VW)))
    with tfwAD.dual_level():
        ty = net(torch)(tfwAD.make_dual(tx, torch.tensor(VX)), tfwAD.make_dual(tw, torch.tensor(VW)))
        tout, tjv = tfwAD.unpack_dual(ty)
    close(out, tout)
    close(jv, tjv)

    J = ember.func.jacfwd(net(ember), argnums=(0, 1))(x, w)
    tJ = torch.autograd.functional.jacobian(net(torch), (tx, tw))
    assert isinstance(J, tuple) and len(J) == 2
    close(J[0], tJ[0])
    close(J[1], tJ[1])
    close(ember.func.jacfwd(net(ember), argnums=1)(x, w), tJ[1])

    H = ember.func.hessian(loss(ember))(x, w)
    tHb = torch.autograd.functional.hessian(loss(torch), (tx, tw))
    close(H, tHb[0][0])
    Hb = ember.func.hessian(loss(ember), argnums=(0, 1))(x, w)
    for a in range(2):
        for b in range(2):
            close(Hb[a][b], tHb[a][b])

    val, (hx, hw) = ember.func.hvp(loss(ember), (x, w), (f64(VX), f64(VW)))
    _, (thx, thw) = torch.autograd.functional.hvp(loss(torch), (tx, tw), (torch.tensor(VX), torch.tensor(VW)))
    close(hx, thx)
    close(hw, thw)


def test_func_transforms_refuse_misuse():
    x = f64(X)
    with pytest.raises(TypeError, match="primals must be a tuple of tensors"):
        ember.func.jvp(ember.tanh, x, (x,))
    with pytest.raises(ValueError, match="argnums 2 is out of range"):
        ember.func.jacfwd(ember.tanh, argnums=2)(x)
    with pytest.raises(RuntimeError, match="expected the function to return one element"):
        ember.func.hvp(ember.tanh, (x,), (x,))
    with pytest.raises(TypeError, match="must return one Tensor"):
        ember.func.jvp(lambda a: 3.0, (x,), (x,))
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="a dual level is open already"):
            ember.func.jvp(ember.tanh, (x,), (x,))


class Cube(ember.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * x * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3.0 * x * x * ctx.scale, None

    @staticmethod
    def jvp(ctx, tx, tscale):
        assert tscale is None
        (x,) = ctx.saved_tensors
        return tx * 3.0 * x * x * ctx.scale


class CubeWithoutJvp(ember.autograd.Function):
    forward = Cube.forward
    backward = Cube.backward


def test_a_python_function_gives_its_jvp_rule_or_fails_by_name():
    x, v = f64(X), f64(VX)
    with fwAD.dual_level():
        y = Cube.apply(fwAD.make_dual(x, v), 2.0)
        np.testing.assert_allclose(fwAD.unpack_dual(y).tangent.numpy(), 6.0 * X * X * VX, rtol=1e-14)
        with pytest.raises(RuntimeError, match="CubeWithoutJvp: forward-mode differentiation"):
            CubeWithoutJvp.apply(fwAD.make_dual(x, v), 2.0)
    # forward over reverse through the Function: its backward written with ember ops
    _, (hv,) = ember.func.hvp(lambda a: Cube.apply(a, 2.0).sum(), (x,), (v,))
    np.testing.assert_allclose(hv.numpy(), 12.0 * X * VX, rtol=1e-13)


def test_gradcheck_checks_forward_mode_and_forward_over_reverse():
    x = f64(X, True)
    r = ember.autograd.gradcheck(lambda a: ember.softmax(a * a, -1), [x], names=["x"], check_forward_ad=True)
    assert r.passed and r.inputs[0].forward.passed and "x (forward)" in str(r)
    assert len(r.inputs[0].forward.worst_index) == 2
    rr = ember.autograd.gradgradcheck(lambda a: ember.tanh(a).sum(1), [x], check_fwd_over_rev=True)
    assert rr.passed and rr.order == 2 and all(i.forward.passed for i in rr.inputs)
    assert "(forward)" not in str(ember.autograd.gradcheck(ember.tanh, [x]))

    class Wrong(ember.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

        @staticmethod
        def jvp(ctx, t):
            return t * 3.0  # wrong

    bad = ember.autograd.gradcheck(Wrong.apply, [x], check_forward_ad=True)
    assert not bad.passed and bad.inputs[0].passed and not bad.inputs[0].forward.passed


def test_a_level_argument_must_be_the_open_level():
    with fwAD.dual_level() as level:
        d = fwAD.make_dual(f64(X), f64(VX), level=level)
        assert fwAD.unpack_dual(d, level=level).tangent is not None
        with pytest.raises(RuntimeError, match="invalid level"):
            fwAD.make_dual(f64(X), f64(VX), level=level + 3)
        with pytest.raises(RuntimeError, match="invalid level"):
            fwAD.unpack_dual(d, level=0)


def test_linearize_gives_the_jvp_at_a_fixed_point():
    x, w = f64(X), f64(W)
    out, jvp_fn = ember.func.linearize(net(ember), x, w)
    with tfwAD.dual_level():
        ty = net(torch)(tfwAD.make_dual(torch.tensor(X), torch.tensor(VX)),
                        tfwAD.make_dual(torch.tensor(W), torch.tensor(VW)))
        tout, tjv = tfwAD.unpack_dual(ty)
    close(out, tout)
    x.copy_(ember.zeros(3, 4, dtype=ember.float64))  # the point was copied
    close(jvp_fn(f64(VX), f64(VW)), tjv)
    with pytest.raises(RuntimeError, match="func::linearize's jvp: expected"):
        jvp_fn(f64(VX))
