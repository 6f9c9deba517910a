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
