"""Mistakes raise the exceptions PyTorch raises, with ember's messages; none crashes the
interpreter (undefined gradients, wrong types, huge sizes)."""

import pytest

import ember


def test_op_errors_are_runtime_errors_with_embers_message():
    with pytest.raises(RuntimeError, match=r"matmul: shapes \[2,3\] and \[2,3\] cannot be multiplied"):
        ember.zeros(2, 3) @ ember.zeros(2, 3)
    with pytest.raises(RuntimeError, match="view"):
        ember.zeros(2, 3).view(4)
    with pytest.raises(RuntimeError, match="sizes must be non-negative"):
        ember.zeros(-1)


def test_out_of_range_is_an_index_error():
    with pytest.raises(IndexError, match="sum: dim 4 is out of range"):
        ember.zeros(3).sum(4)
    with pytest.raises(IndexError, match="select: index 5 is out of range"):
        ember.zeros(3).select(0, 5)


def test_memory_the_system_refuses_is_a_memory_error():
    with pytest.raises(MemoryError, match="out of memory"):
        ember.zeros(1 << 20, 1 << 20)
    with pytest.raises(RuntimeError, match="more than 2"):
        ember.zeros(1 << 40, 1 << 30)


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError):
        ember.zeros(2) + "a"
    with pytest.raises(TypeError):
        ember.zeros("a")
    with pytest.raises(TypeError):
        ember.matmul(ember.zeros(2), None)
    with pytest.raises(TypeError):
        ember.Tensor()
    with pytest.raises(TypeError, match="sizes must be integers"):
        ember.ones(2).view(1.5)


def test_gradient_misuse():
    with pytest.raises(RuntimeError, match="does not require grad"):
        ember.zeros(2).sum().backward()
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        (ember.ones(2, requires_grad=True) * 2).backward()
    with pytest.raises(RuntimeError, match="leaf"):
        (ember.ones(2, requires_grad=True) * 2).requires_grad_(False)
    with pytest.raises(RuntimeError, match="float32 and float64"):
        ember.ones(2, dtype=ember.int64).requires_grad_()
    t = ember.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        t.fill_(0)  # an in-place write to a leaf that requires grad, outside no_grad


def test_integers_past_int64_are_overflow_errors():
    with pytest.raises(OverflowError, match="does not fit int64"):
        ember.zeros(2 ** 64)
    with pytest.raises(OverflowError, match="does not fit int64"):
        ember.ones(3)[10 ** 20]
    with pytest.raises(ValueError, match="does not fit int64"):
        ember.tensor(2 ** 70)


def _line_of(marker):
    """The line of this file holding marker (a comment at the call), as errors name it."""
    import inspect
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i + 1 for i, text in enumerate(lines) if text.rstrip().endswith("# " + marker))


def test_errors_name_the_python_line_that_called():
    import re
    a = ember.ones(2, 3)
    with pytest.raises(RuntimeError) as e:
        a @ a  # matmul-here
    assert re.search(r"; called at .*test_errors\.py:%d \(test_errors_name_the_python_line_that_called\)$"
                     % _line_of("matmul-here"), str(e.value)), str(e.value)
    # through ember's own Python code, the user's line is named
    import ember.nn.functional as F
    with pytest.raises(RuntimeError) as e:
        F.linear(a, ember.ones(5, 4))  # layer-norm-here
    assert "test_errors.py:%d" % _line_of("layer-norm-here") in str(e.value)


def test_anomaly_and_backward_errors_name_the_python_line():
    x = ember.tensor([-1.0, 2.0], dtype=ember.float64, requires_grad=True)
    with ember.autograd.detect_anomaly():
        with pytest.raises(RuntimeError) as e:
            ember.log(x)  # log-here
    msg = str(e.value)
    assert "produced NaN or Inf in its forward" in msg
    assert "test_errors.py:%d" % _line_of("log-here") in msg and msg.count("called at") == 1
    y = (x * x).sum()  # mul-here
    y.backward()
    with pytest.raises(RuntimeError) as e:
        y.backward()
    assert "test_errors.py:%d" % _line_of("mul-here") in str(e.value)
