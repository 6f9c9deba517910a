"""ember.autocast: float32 matrix products with bfloat16 inputs and float32 sums, checked
against float64 products of the inputs PyTorch rounds to bfloat16 (the smallest products
stay float32); a Linear layer's
gradients against PyTorch's under torch.autocast; the scope as a block, a decorator,
nested, per thread; bad arguments."""

import threading

import numpy as np
import pytest

import ember
import ember.nn as nn

torch = pytest.importorskip("torch")
needs_bf16 = pytest.mark.skipif(not ember.bf16_products_available(), reason="no AVX512_BF16 on this processor")


def bf16_rounded(x):
    """x (float32 numpy) rounded to bfloat16 by PyTorch, as float64"""
    return torch.from_numpy(x).bfloat16().double().numpy()


@needs_bf16
def test_products_are_float32_sums_of_bfloat16_rounded_inputs():
    rng = np.random.default_rng(1)
    for m, k, n in [(5, 7, 3), (70, 129, 45), (33, 600, 40)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k)).astype(np.float32)  # used transposed, as a Linear weight
        ea, eb = ember.from_numpy(a), ember.from_numpy(b)
        with ember.autocast():
            c = (ea @ eb.t()).numpy().astype(np.float64)
        plain = (ea @ eb.t()).numpy()
        if m * n * k < 2**17:  # the smallest products stay float32
            assert np.array_equal(c.astype(np.float32), plain)
            continue
        rounded = bf16_rounded(a) @ bf16_rounded(b).T
        mags = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
        assert np.all(np.abs(c - rounded) <= (k + 2) * 2.0**-24 * mags)
        assert not np.array_equal(c.astype(np.float32), plain)  # bfloat16 products really ran
        u = 2.0**-8
        exact = a.astype(np.float64) @ b.astype(np.float64).T
        assert np.all(np.abs(c - exact) <= (2 * u + u * u + (k + 2) * 2.0**-24) * mags)


@needs_bf16
def test_a_linear_layers_gradients_match_pytorch_autocast():
    torch.manual_seed(0)
    ref = torch.nn.Linear(256, 128)
    x = torch.randn(64, 256)
    layer = nn.Linear(256, 128)
    with ember.no_grad():
        layer.weight.copy_(ember.from_dlpack(ref.weight.detach().clone()))
        layer.bias.copy_(ember.from_dlpack(ref.bias.detach().clone()))
    ex = ember.from_dlpack(x.clone()).requires_grad_()
    xt = x.clone().requires_grad_()
    with ember.autocast():
        y = layer(ex)
        assert y.dtype == ember.float32
    (y * y).sum().backward()  # the backward outside the scope runs in bfloat16 too
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yt = ref(xt)
    (yt.float() * yt.float()).sum().backward()
    for ours, theirs in [(y, yt), (layer.weight.grad, ref.weight.grad), (ex.grad, xt.grad)]:
        theirs = theirs.detach().float().numpy()
        scale = np.abs(theirs).max()
        assert np.abs(ours.detach().numpy() - theirs).max() <= 2e-2 * scale
    # float32 gradients differ from the bfloat16 ones
    plain = nn.Linear(256, 128)
    with ember.no_grad():
        plain.weight.copy_(layer.weight)
        plain.bias.copy_(layer.bias)
    (plain(ember.from_dlpack(x.clone())) ** 2).sum().backward()
    assert not ember.equal(plain.weight.grad, layer.weight.grad)


def test_the_scope_nests_decorates_restores_and_belongs_to_the_thread():
    assert not ember.is_autocast_enabled()
    with ember.autocast():
        assert ember.is_autocast_enabled()
        with ember.autocast(enabled=False):
            assert not ember.is_autocast_enabled()
        assert ember.is_autocast_enabled()
        seen = []
        t = threading.Thread(target=lambda: seen.append(ember.is_autocast_enabled()))
        t.start()
        t.join()
        assert seen == [False]
    assert not ember.is_autocast_enabled()

    @ember.autocast()
    def inside():
        return ember.is_autocast_enabled()

    assert inside() and not ember.is_autocast_enabled()
    with pytest.raises(RuntimeError):
        with ember.autocast("cpu", dtype=getattr(ember, "bfloat16", None)):
            raise RuntimeError("boom")
    assert not ember.is_autocast_enabled()
    scope = ember.autocast()
    with scope:
        with scope:  # the same object entered twice
            assert ember.is_autocast_enabled()
        assert ember.is_autocast_enabled()
    assert not ember.is_autocast_enabled()
    # one object entered on two threads: each thread gets back its own setting
    shared, log = ember.autocast(), {}
    entered, exited = threading.Event(), threading.Event()

    def first():
        with shared:
            entered.set()
            exited.wait()
        log["first after"] = ember.is_autocast_enabled()

    def second():
        with ember.autocast(enabled=True):
            entered.wait()
            with shared:
                exited.set()
                t1.join()
            log["second inside its outer"] = ember.is_autocast_enabled()

    t1, t2 = threading.Thread(target=first), threading.Thread(target=second)
    t1.start(), t2.start()
    t2.join()
    assert log == {"first after": False, "second inside its outer": True}
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        ember.autocast().__exit__(None, None, None)


def test_float64_products_never_change():
    a = ember.randn(20, 30, dtype=ember.float64)
    b = ember.randn(30, 10, dtype=ember.float64)
    plain = a @ b
    with ember.autocast():
        assert ember.equal(a @ b, plain)


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="autocast: expected device_type 'cpu'.*got 'cuda'"):
        ember.autocast("cuda")
    with pytest.raises(ValueError, match="autocast: expected dtype ember.bfloat16"):
        ember.autocast("cpu", dtype=ember.float64)
    with pytest.raises(TypeError, match="autocast: expected enabled to be a bool, got str"):
        ember.autocast(enabled="yes")
    assert not ember.is_autocast_enabled()
