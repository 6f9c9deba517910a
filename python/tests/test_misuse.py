"""Misuse from Python that once crashed the interpreter or gave a wrong answer: each case
must end in a Python exception (or the right result), and ember must work afterwards.
Cases that could crash run in a subprocess, so that a regression fails one test, not the
suite."""

import gc
import threading
import warnings

import numpy as np
import pytest

import ember
import ember.nn as nn
from ember.autograd import Function


def test_sequences_whose_items_are_made_as_they_are_read():
    assert ember.tensor(range(100000, 100005)).tolist() == list(range(100000, 100005))
    rows = [ember.arange(3) + 1000, ember.arange(3) + 2000]
    assert ember.tensor(rows).tolist() == [[1000, 1001, 1002], [2000, 2001, 2002]]
    assert ember.zeros(range(2, 4)).shape == (2, 3)
    assert ember.zeros(ember.tensor([2, 3])).shape == (2, 3)
    assert ember.ones(5).reshape(ember.tensor([5, 1])).shape == (5, 1)
    assert ember.tensor([np.arange(1000.5, 1003), np.arange(2000.5, 2003)]).tolist() == [
        [1000.5, 1001.5, 1002.5], [2000.5, 2001.5, 2002.5]]


def test_deep_nesting_is_an_error_not_a_crash():
    deep = 0
    for _ in range(30000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than 64 deep"):
        ember.tensor(deep)
    with pytest.raises((ValueError, IndexError)):
        ember.zeros(3)[deep]


def test_a_function_ctx_kept_past_its_call_is_an_error():
    kept = []

    class Keep(Function):
        @staticmethod
        def forward(ctx, x):
            kept.append(ctx._c)
            ctx.save_for_backward(x)
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    x = ember.ones(3, requires_grad=True)
    Keep.apply(x).sum().backward()
    gc.collect()
    with pytest.raises(RuntimeError, match="used after the forward or backward it was made for returned"):
        kept[0].saved_tensors()


def test_an_attention_hook_may_keep_its_module(run_python):
    code = """
        import gc, ember
        from ember import nn
        enc = nn.TransformerEncoderLayer(8, 2, 16, 0.0)
        mods = []
        enc._impl.self_attn.register_attention_hook(lambda mod, internals: mods.append(mod))
        enc(ember.randn(2, 5, 8))
        del enc; gc.collect()
        junk = [ember.randn(64, 64) for _ in range(200)]
        x = ember.randn(2, 5, 8)
        print(mods[0].num_heads, mods[0].forward(x, x, x)[0].shape)
    """
    done = run_python(code, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2 (2, 5, 8)"


def test_read_only_numpy_memory_is_copied_not_shared(tmp_path):
    path = tmp_path / "m.bin"
    np.arange(4.0).tofile(path)
    mm = np.memmap(path, dtype=np.float64, mode="r")
    with pytest.warns(UserWarning, match="not writable; the tensor is a copy"):
        t = ember.from_numpy(mm)
    t.fill_(1.0)  # its own memory
    assert t.tolist() == [1.0] * 4 and mm.tolist() == [0.0, 1.0, 2.0, 3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            ember.from_numpy(mm)
        assert ember.tensor(mm).tolist() == [0.0, 1.0, 2.0, 3.0]  # a copy anyway: no warning


def test_a_daemon_thread_computing_at_exit_does_not_abort(run_python):
    code = """
        import ember, threading, time
        def worker():
            a = ember.randn(300, 300)
            while True:
                a = (a @ a) * 0.001 + 1
        threading.Thread(target=worker, daemon=True).start()
        time.sleep(0.3)
        print("main exits")
    """
    for _ in range(3):
        done = run_python(code, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "main exits"


def test_backward_from_several_threads_into_one_leaf():
    x = ember.randn(32, 32, dtype=ember.float64, generator=ember.Generator(1), requires_grad=True)
    y = (x * x).sum()
    errors = []

    def body():
        try:
            for _ in range(50):
                y.backward(retain_graph=True)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=body) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert np.allclose(x.grad.numpy(), 200 * 2 * x.detach().numpy(), rtol=1e-12)


def test_gradcheck_leaves_its_input_as_it_was_when_the_function_raises():
    x = ember.tensor([1.0, 2.0, 3.0], dtype=ember.float64, requires_grad=True)
    calls = [0]

    def f(t):
        calls[0] += 1
        if calls[0] > 2:
            raise KeyError("from f")
        return t * t

    with pytest.raises(KeyError):
        ember.autograd.gradcheck(f, [x])
    assert x.tolist() == [1.0, 2.0, 3.0]


def test_a_cpp_layers_tensors_cannot_be_replaced_silently():
    lin = nn.Linear(3, 2)
    with pytest.raises(AttributeError, match="Linear.weight is the C\\+\\+ layer's and cannot be replaced"):
        lin.weight = nn.Parameter(ember.zeros(2, 3))


def test_paths_with_nul_and_of_other_types():
    with pytest.raises(ValueError, match="save: the path contains a NUL character"):
        ember.save(ember.ones(2), "a\0b.h5")
    with pytest.raises(TypeError, match="load: expected a path"):
        ember.load(None)


def test_in_place_operators_refuse_what_the_operators_refuse():
    t = ember.tensor([1])
    with pytest.raises(RuntimeError, match="add: the scalar 1.5 is not an integer"):
        t += 1.5
    t *= 3
    assert t.tolist() == [3]


def test_registration_checks():
    m = nn.Module()
    with pytest.raises(TypeError, match="register_buffer: 'b' must be a Tensor or None, got int"):
        m.register_buffer("b", 5)
    with pytest.raises(KeyError, match="non-empty and hold no"):
        m.register_buffer("a.b", ember.ones(1))
    with pytest.raises(TypeError, match="register_forward_hook: the hook must be callable, got int"):
        m.register_forward_hook(3)
    mha = nn.MultiheadAttention(8, 2)
    with pytest.raises(TypeError, match="register_attention_hook: the hook must be callable"):
        mha.register_attention_hook(3)
    with pytest.raises(TypeError, match="head_statistics: weights must be a float32 or float64 Tensor, got"):
        ember.watch.head_statistics(None, ember.zeros(1, 1, 2, 2, dtype=ember.int64))


def test_assignments_take_what_pytorch_takes_and_refuse_the_rest():
    t = ember.zeros(2, 3)
    t[0] = [1.0, 2.0, 3.0]
    t[1] = np.array([4.0, 5.0, 6.0])
    assert t.tolist() == [[1, 2, 3], [4, 5, 6]]
    t[[0, 1], [2, 0]] = [7.0, 8.0]
    assert t.tolist() == [[1, 2, 7], [8, 5, 6]]
    for bad in ("x", None, b"x"):
        with pytest.raises(TypeError, match="__setitem__: can't assign a"):
            t[0] = bad
    e = ember.zeros(1).expand(4)
    with pytest.raises(RuntimeError, match="are one memory location"):
        e[[0, 1]] = 1.0


def test_randint_without_a_generator():
    assert ember.randint(5, (3,)).shape == (3,)
    assert ember.randint(0, 5, (3,)).max().item() < 5


def test_new_without_init_is_refused():
    import copy

    import ember.nn as nn

    for cls in (ember.Tensor, ember.Generator, ember.dtype, nn.Parameter, ember._C._nn.Linear,
                ember._C._optim.SGD, ember._C._nn.Packing):
        with pytest.raises(TypeError, match="is not safe"):
            cls.__new__(cls)
    with pytest.raises(TypeError):
        copy.copy(ember.ones(2))
    # construction itself is as before
    assert ember.Generator(5).get_state() == [5, 0] and ember.Tensor(ember.ones(2)).tolist() == [1.0, 1.0]
    p = nn.Parameter(ember.ones(2))
    assert p.requires_grad and isinstance(p, ember.Tensor)


def test_seeds_are_taken_as_pytorch_takes_them_and_bad_ones_refused():
    import numpy as np
    torch = pytest.importorskip("torch")
    for seed in (-1, -5, 0, 2**64 - 1, np.int64(7)):
        assert ember.manual_seed(seed).initial_seed() == torch.manual_seed(int(seed)).initial_seed()
        assert ember.Generator(seed).initial_seed() == torch.Generator().manual_seed(int(seed)).initial_seed()
    with pytest.raises(ValueError, match="not below 2\\*\\*64"):
        ember.manual_seed(2**64)
    with pytest.raises(ValueError, match="below -2\\*\\*63"):
        ember.Generator().manual_seed(-2**63 - 1)
    assert ember.manual_seed(True).initial_seed() == 1  # bool is an int (PyTorch 1.13 refuses it)
    with pytest.raises(TypeError, match="manual_seed: expected an int seed, got float"):
        ember.manual_seed(2.5)


def test_full_refuses_a_fill_value_that_is_not_a_number():
    with pytest.raises(TypeError, match="full: fill_value must be a number"):
        ember.full((2,), "x")
    assert ember.full((2,), True).dtype == ember.bool


def test_attention_names_a_float_mask_as_its_own_error():
    import ember.nn.functional as F
    q = ember.randn(1, 2, 3, 4)
    with pytest.raises(TypeError, match=r"scaled_dot_product_attention: expected a bool attn_mask .* got "
                                        r"ember.float32 of shape \[3, 3\]"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=ember.zeros(3, 3))
