"""NumPy and ember share memory both ways: the same data pointer, a write on either side
seen on the other, and each side keeping the other's memory alive."""

import gc
import sys

import numpy as np
import pytest

import ember


def array_address(a):
    return a.__array_interface__["data"][0]


def test_numpy_is_a_view_of_the_tensor():
    t = ember.arange(6, dtype=ember.float32).view(2, 3)
    a = t.numpy()
    assert a.dtype == np.float32 and a.shape == (2, 3)
    assert array_address(a) == t.data_ptr()
    a[0, 1] = 100
    assert t[0, 1].item() == 100
    t[1, 2] = -5
    assert a[1, 2] == -5


def test_numpy_keeps_the_storage_alive():
    a = ember.ones(1000, dtype=ember.float64).numpy()
    gc.collect()
    assert a.sum() == 1000.0


def test_numpy_of_a_strided_view():
    t = ember.arange(12, dtype=ember.int64).view(3, 4)
    a = t.t().numpy()
    assert a.tolist() == np.arange(12).reshape(3, 4).T.tolist()
    assert array_address(a) == t.data_ptr()
    assert t[:, 1::2].numpy().tolist() == [[1, 3], [5, 7], [9, 11]]
    assert (t > 5).numpy().dtype == np.bool_


def test_numpy_refuses_a_tensor_that_requires_grad():
    t = ember.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Use tensor.detach\(\).numpy\(\) instead"):
        t.numpy()
    assert t.detach().numpy().tolist() == [1.0, 1.0]


@pytest.mark.parametrize("dtype,ember_dtype", [
    (np.float32, ember.float32), (np.float64, ember.float64), (np.int64, ember.int64), (np.bool_, ember.bool)])
def test_from_numpy_shares_the_array(dtype, ember_dtype):
    a = np.zeros((2, 3), dtype=dtype)
    t = ember.from_numpy(a)
    assert t.dtype == ember_dtype and t.shape == (2, 3)
    assert t.data_ptr() == array_address(a)
    a[1, 2] = 1
    assert t[1, 2].item() == 1
    t[0, 0] = 1
    assert a[0, 0] == 1


def test_from_numpy_keeps_the_array_alive_and_reads_its_strides():
    a = np.arange(20, dtype=np.float64).reshape(4, 5)[::2, 1::2]
    t = ember.from_numpy(a)
    assert t.data_ptr() == array_address(a) and t.stride() == (10, 2)
    del a
    gc.collect()
    assert t.tolist() == [[1.0, 3.0], [11.0, 13.0]]
    assert (t * 2).sum().item() == 56.0


def test_from_numpy_refuses_what_ember_cannot_hold():
    with pytest.raises(TypeError, match="dtype int32"):
        ember.from_numpy(np.zeros(3, dtype=np.int32))
    with pytest.raises(TypeError, match="non-native byte order"):
        ember.from_numpy(np.zeros(3, dtype=">f8"))
    with pytest.raises(ValueError, match="negative"):
        ember.from_numpy(np.arange(3.0)[::-1])


def test_tensor_from_an_array_copies():
    a = np.arange(3.0)
    t = ember.tensor(a)
    assert t.dtype == ember.float64 and t.data_ptr() != array_address(a)
    a[0] = 9
    assert t[0].item() == 0


def test_asarray_shares_too_and_ufuncs_take_tensors():
    t = ember.arange(4, dtype=ember.float64)
    a = np.asarray(t)
    assert array_address(a) == t.data_ptr()
    assert np.exp(t).tolist() == np.exp(np.arange(4.0)).tolist()
    assert np.asarray(t, dtype=np.float32).dtype == np.float32


def test_the_array_is_released_with_the_last_tensor_over_it():
    a = np.zeros(3)
    before = sys.getrefcount(a)
    t = ember.from_numpy(a)
    v = t[1:]
    assert sys.getrefcount(a) == before + 1  # one reference, held by the storage
    del t, v
    assert sys.getrefcount(a) == before
