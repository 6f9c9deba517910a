"""The DLPack protocol: ember, PyTorch and NumPy share memory both ways, without copies."""

import gc

import numpy as np
import pytest
import torch

import ember


def addr(t):
    return t.data_ptr()


@pytest.mark.parametrize("dtype,tdtype", [(ember.float32, torch.float32), (ember.float64, torch.float64),
                                          (ember.int64, torch.int64)])
def test_torch_shares_ember_memory(dtype, tdtype):
    e = ember.arange(12, dtype=dtype).reshape(3, 4)
    t = torch.from_dlpack(e)
    assert t.dtype == tdtype and tuple(t.shape) == (3, 4)
    assert t.data_ptr() == addr(e)
    t[1, 2] = 100
    assert e[1, 2].item() == 100
    e[0, 0] = -5
    assert t[0, 0].item() == -5


def test_ember_shares_torch_memory():
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    e = ember.from_dlpack(t)
    assert e.dtype == ember.float64 and e.shape == (2, 3) and addr(e) == t.data_ptr()
    e[1, 1] = 42
    assert t[1, 1].item() == 42
    t[0, 2] = 7
    assert e[0, 2].item() == 7


def test_views_keep_strides_both_ways():
    e = ember.arange(24, dtype=ember.float64).reshape(4, 6)
    v = e.t()[1:5:2]  # non-contiguous, offset
    t = torch.from_dlpack(v)
    assert tuple(t.shape) == tuple(v.shape) and t.stride() == tuple(v.stride())
    assert t.data_ptr() == addr(v)
    assert t.tolist() == v.tolist()
    back = ember.from_dlpack(torch.arange(24.0, dtype=torch.float64).reshape(4, 6).t()[2:])
    assert back.stride() == (1, 6) and back.tolist() == torch.arange(24.0).double().reshape(4, 6).t()[2:].tolist()


def test_numpy_both_ways():
    e = ember.arange(5, dtype=ember.float32)
    a = np.from_dlpack(e)  # NumPy 1.24 makes it read-only: ember writes, NumPy sees
    assert a.__array_interface__["data"][0] == addr(e)
    e[3] = 9
    assert a[3] == 9
    arr = np.linspace(0, 1, 7)
    f = ember.from_dlpack(arr)
    assert addr(f) == arr.__array_interface__["data"][0]
    f[2] = 5
    assert arr[2] == 5


def test_memory_outlives_the_producer():
    e = ember.from_dlpack(torch.arange(1000, dtype=torch.int64))
    gc.collect()
    assert e.sum().item() == 999 * 1000 // 2
    t = torch.from_dlpack(ember.full((3,), 2.5, dtype=ember.float64))
    gc.collect()
    assert t.tolist() == [2.5, 2.5, 2.5]


def test_round_trip_and_capsules():
    e = ember.randn(3, 2, dtype=ember.float64, generator=ember.Generator(1))
    back = ember.from_dlpack(torch.from_dlpack(e))
    assert addr(back) == addr(e) and ember.equal(back, e)
    cap = ember.to_dlpack(e)
    t = torch.utils.dlpack.from_dlpack(cap)
    assert t.data_ptr() == addr(e)
    with pytest.raises(ValueError, match="already consumed"):
        ember.from_dlpack(cap)
    unused = e.__dlpack__()  # freed by its destructor, never consumed
    del unused
    e2 = ember.from_dlpack(torch.utils.dlpack.to_dlpack(torch.ones(2)))
    assert e2.tolist() == [1.0, 1.0]


def test_empty_and_scalar():
    z = ember.zeros(0, 3)
    assert tuple(torch.from_dlpack(z).shape) == (0, 3)
    assert ember.from_dlpack(torch.zeros(2, 0)).shape == (2, 0)
    s = torch.from_dlpack(ember.tensor(3.5))
    assert s.dim() == 0 and s.item() == 3.5
    assert ember.from_dlpack(torch.tensor(7)).item() == 7


def test_refusals():
    with pytest.raises(RuntimeError, match="requires grad"):
        ember.ones(2, requires_grad=True).__dlpack__()
    with pytest.raises(TypeError, match="Bool"):
        ember.tensor([True]).__dlpack__()
    with pytest.raises(TypeError, match="int32"):
        ember.from_dlpack(torch.zeros(2, dtype=torch.int32))
    with pytest.raises(TypeError, match="__dlpack__ or a DLPack capsule"):
        ember.from_dlpack([1, 2])
    with pytest.raises(ValueError, match="stream"):
        ember.ones(2).__dlpack__(stream=5)
    assert ember.ones(2).__dlpack_device__() == (1, 0)


def test_gradients_flow_on_the_ember_side():
    t = torch.tensor([1.0, 2.0], dtype=torch.float64)
    x = ember.from_dlpack(t).requires_grad_()
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_a_capsule_whose_sizes_and_strides_overflow_is_refused():
    # a producer's DLManagedTensor made by hand: float32 [2^62, 4], strides left to ember
    import ctypes

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    class Managed(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(64)
    shape = (ctypes.c_int64 * 2)(2**62, 4)
    m = Managed(DLTensor(ctypes.cast(buffer, ctypes.c_void_p), 1, 0, 2, 2, 32, 1, shape, None, 0), None, None)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(m), b"dltensor", None)
    with pytest.raises(ValueError, match="^from_dlpack: the DLPack tensor's sizes and strides span more than 2"):
        ember.from_dlpack(capsule)
    # sizes no tensor of ember's may have (their product past 2^56), though one of them is 0
    shape3 = (ctypes.c_int64 * 3)(0, 2**62, 2**62)
    m3 = Managed(DLTensor(ctypes.cast(buffer, ctypes.c_void_p), 1, 0, 3, 2, 32, 1, shape3, None, 0), None, None)
    with pytest.raises(RuntimeError, match="^from_dlpack: .*2\\^56"):
        ember.from_dlpack(new_capsule(ctypes.addressof(m3), b"dltensor", None))
