"""ember.bfloat16 against torch.bfloat16: the same rounding bit for bit, the same printed
values, memory shared both ways through DLPack, files that keep it, and clear refusals."""

import math

import numpy as np
import pytest
import torch

import ember


def bits(e):
    """The bit patterns of a bfloat16 ember tensor, read through torch over its memory."""
    return torch.from_dlpack(e).view(torch.int16).flatten().tolist()


def edge_and_random_floats():
    tie = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-133, 2**-134, 3 * 2**-134, 1e-40, -0.0, 0.0]
    big = [3.3895313892515355e38, 3.3961775292304465e38, 3.4e38, -3.4e38, float("inf"), float("-inf")]
    rng = np.random.default_rng(7)
    patterns = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    # about half of them put the dropped half exactly at a tie, where rounding is decided
    patterns[::2] = (patterns[::2] & 0xFFFF0000) | 0x8000
    floats = patterns.view(np.float32)
    floats = floats[~np.isnan(floats)]
    return np.concatenate([np.array(tie + big, dtype=np.float32), floats])


def test_rounding_matches_torch_bit_for_bit():
    x = edge_and_random_floats()
    e = ember.from_numpy(x).to(ember.bfloat16)
    t = torch.from_numpy(x).bfloat16()
    assert bits(e) == t.view(torch.int16).tolist()
    # float64 goes through float32, as torch's conversion
    d = x.astype(np.float64) * (1 + 2**-30)
    assert bits(ember.from_numpy(d).to(ember.bfloat16)) == torch.from_numpy(d).bfloat16().view(torch.int16).tolist()
    # int64 too
    i = np.array([0, 1, -257, 2**40 + 1, -(2**62)], dtype=np.int64)
    assert bits(ember.from_numpy(i).bfloat16()) == torch.from_numpy(i).bfloat16().view(torch.int16).tolist()


def test_nan_stays_nan_and_values_come_back_exactly():
    e = ember.tensor([float("nan"), -float("nan"), 0.1]).bfloat16()
    back = e.float().tolist()
    assert math.isnan(back[0]) and math.isnan(back[1]) and back[2] == 0.10009765625
    assert e.tolist()[2] == 0.10009765625 and e[2].item() == 0.10009765625
    x = torch.randn(1000).bfloat16()
    assert ember.from_dlpack(x).float().tolist() == x.float().tolist()


def test_dtype_object():
    assert repr(ember.bfloat16) == "ember.bfloat16"
    assert ember.bfloat16.is_floating_point and ember.bfloat16.itemsize == 2
    e = ember.zeros(2, 3, dtype=ember.bfloat16)
    assert e.dtype == ember.bfloat16 and e.is_floating_point() and e.element_size() == 2
    assert ember.full((2,), 0.1, dtype=ember.bfloat16).tolist() == [0.10009765625] * 2
    assert ember.tensor([1, 2], dtype=ember.bfloat16).dtype == ember.bfloat16


@pytest.mark.parametrize("values", [[1.0, 0.1], [1.0, 2.0, 3.0], [1e10, 1e-5, 3.0], [float("nan"), float("inf"), 1.5],
                                    [-0.5, 123.456, 7.0], [0.001, 1000.0], [[1.0, 0.1], [2.5, -3.0]], 0.3])
def test_printing_matches_torch(values):
    e = repr(ember.tensor(values).bfloat16())
    t = repr(torch.tensor(values).bfloat16())
    assert e.split(", shape=")[0] == t.split(", dtype=")[0]
    assert e.endswith("dtype=bfloat16)")


def test_dlpack_shares_memory_both_ways():
    e = ember.tensor([[1.0, 0.1], [2.0, 3.0]]).bfloat16()
    t = torch.from_dlpack(e)
    assert t.dtype == torch.bfloat16 and t.data_ptr() == e.data_ptr()
    t[0, 0] = 5.0
    assert e[0, 0].item() == 5.0
    src = torch.tensor([0.1, 2.0, -3.0]).bfloat16()[::2]
    back = ember.from_dlpack(src)
    assert back.dtype == ember.bfloat16 and back.data_ptr() == src.data_ptr() and back.stride() == (2,)
    assert back.tolist() == src.float().tolist()
    src[0] = 7.0
    assert back[0].item() == 7.0


def test_views_and_copies():
    e = ember.arange(6, dtype=ember.float32).reshape(2, 3).bfloat16()
    assert e.t().contiguous().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert e[:, 1:].clone().tolist() == [[1.0, 2.0], [4.0, 5.0]]
    e[0, 0] = 0.1
    e[e > 4.5] = -1.0
    assert e.tolist() == [[0.10009765625, 1.0, 2.0], [3.0, 4.0, -1.0]]
    assert (e == 0.1).tolist() == [[True, False, False], [False, False, False]]  # 0.1 rounded, as torch
    assert ember.allclose(e, e.clone())


def test_numpy_is_refused_with_a_way_out():
    e = ember.ones(2, dtype=ember.bfloat16)
    with pytest.raises(TypeError, match="NumPy has no bfloat16.*float()"):
        e.numpy()
    with pytest.raises(TypeError, match="NumPy has no bfloat16"):
        np.asarray(e)
    assert e.float().numpy().tolist() == [1.0, 1.0]


def test_ops_that_compute_refuse_it():
    e = ember.ones(2, 2, dtype=ember.bfloat16)
    for f in (lambda: e + e, lambda: e * 2, lambda: e.sum(), lambda: e @ e, lambda: e.exp()):
        with pytest.raises(RuntimeError, match=r"bfloat16 tensors hold and convert values; compute in float32 \(\.float\(\)\)"):
            f()
    # an op that calls another is named in its errors, not the other (amax, std, trace, mm, bmm)
    b = ember.ones(2, 2, 2, dtype=ember.bfloat16)
    for name, f in (("amax", lambda: e.amax()), ("std", lambda: e.std()), ("trace", lambda: e.trace()),
                    ("mm", lambda: e.mm(e)), ("bmm", lambda: b.bmm(b)), ("min", lambda: e.min()),
                    ("min", lambda: e.min(1)), ("argmax", lambda: e.argmax())):
        with pytest.raises(RuntimeError, match="^" + name + r": bfloat16 tensors hold .* got bfloat16 of shape \[2,2"):
            f()
    with pytest.raises(RuntimeError, match="requires_grad_: bfloat16"):
        e.requires_grad_()
    with pytest.raises(RuntimeError, match="requires_grad_: bfloat16"):
        ember.zeros(2, dtype=ember.bfloat16, requires_grad=True)


def test_saved_and_loaded_bit_for_bit(tmp_path):
    h5py = pytest.importorskip("h5py")
    x = torch.tensor([0.1, -0.0, float("inf"), 1e-40, float("nan")]).bfloat16()
    e = ember.from_dlpack(x)
    path = str(tmp_path / "t.h5")
    ember.save({"w": e}, path)
    with h5py.File(path, "r") as f:
        assert f["w"].dtype == np.float32 and f["w"].attrs["dtype"] == "bfloat16"
        stored = torch.from_numpy(f["w"][()])
    assert stored.bfloat16().view(torch.int16).tolist() == x.view(torch.int16).tolist()
    assert bits(ember.load(path)["w"]) == x.view(torch.int16).tolist()
    with pytest.raises(RuntimeError, match="NumPy has no bfloat16"):
        ember.save({"w": e}, str(tmp_path / "t.npz"))
