"""Advanced indexing against PyTorch's: bool masks, several index tensors broadcast
together (adjacent or apart), mixed with ints, slices, None and ...; gradients through
them; and assignments through them (index_put_)."""

import numpy as np
import pytest
import torch

import ember

A = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5) * 0.5 - 7


def both(spec):
    """The index in ember's and in PyTorch's terms ("mask" entries become masks of A)."""
    e, t = [], []
    for item in spec:
        if isinstance(item, np.ndarray):
            e.append(ember.from_numpy(item.copy()))
            t.append(torch.from_numpy(item.copy()))
        else:
            e.append(item)
            t.append(item)
    return tuple(e), tuple(t)


M23 = np.array([[True, False, True], [False, False, True]])
INDICES = [
    [A[..., 0, 0] > -5],                     # a mask over the first two dims
    [A > 0],                                 # a mask over all
    [slice(None), np.array([2, 0, -1])],
    [np.array([1, 0]), np.array([2, 1])],    # adjacent, broadcast (2,)
    [np.array([[1], [0]]), slice(None), np.array([3, 0, 1])],  # apart: B first, (2, 3) x rest
    [slice(None), np.array([0, 2]), np.array([[1], [3]])],     # adjacent in the middle: B = (2, 2)
    [0, np.array([2, 1]), slice(1, 4), np.array([4, 0])],      # an int, then apart
    [Ellipsis, np.array([0, 0, 4])],
    [None, np.array([1]), Ellipsis, np.array([1, 2])],
    [slice(1, None), A[0, :, :, 1] > -5],
    [np.array([1, 0]), M23[1]],
    [slice(None), [], slice(None)],
    [np.array([True, False])],
    [[1, 0, 1], [2, 2, 0]],
]


@pytest.mark.parametrize("spec", INDICES)
def test_values_and_gradients_match_pytorch(spec):
    e_idx, t_idx = both(spec)
    x = ember.from_numpy(A.copy()).requires_grad_()
    tx = torch.from_numpy(A.copy()).requires_grad_()
    got, want = x[e_idx], tx[t_idx]
    assert got.shape == tuple(want.shape)
    assert got.tolist() == want.tolist()
    g = np.random.default_rng(0).standard_normal(tuple(want.shape))
    got.backward(ember.from_numpy(g))
    want.backward(torch.from_numpy(g))
    assert np.array_equal(x.grad.numpy(), tx.grad.numpy())  # repeated indices accumulate alike


def test_views_of_views_and_non_contiguous_inputs():
    x = ember.from_numpy(A.copy()).transpose(1, 3)[:, 1:]
    t = torch.from_numpy(A.copy()).transpose(1, 3)[:, 1:]
    for e_idx, t_idx in [both([np.array([1, 0]), slice(None), np.array([2, 1])]),
                         both([t.numpy()[..., 0] > -3])]:
        assert x[e_idx].tolist() == t[t_idx].tolist()


def test_assignment_through_advanced_indices_matches_index_put():
    for spec, value in [([A > 3], 0.0), ([np.array([1, 0]), np.array([2, 1])], -1.0),
                        ([slice(None), np.array([0, 2])], np.full((2, 2, 4, 5), 9.0)),
                        ([A[..., 0] < 0], np.arange(5.0)),
                        ([0, np.array([2, 2]), slice(None), np.array([1, 1])], np.array([[3.0], [4.0]]))]:
        e_idx, t_idx = both(spec)
        x, t = ember.from_numpy(A.copy()), torch.from_numpy(A.copy())
        ev = value if isinstance(value, float) else ember.from_numpy(value)
        tv = value if isinstance(value, float) else torch.from_numpy(value)
        x[e_idx] = ev
        t[t_idx] = tv
        assert x.tolist() == t.tolist(), spec


def test_assignment_into_a_view_and_other_dtypes():
    base = ember.zeros(4, 6, dtype=ember.int64)
    v = base.t()[1:]  # non-contiguous view: the write lands in base
    v[ember.tensor([0, 2]), ember.tensor([3, 1])] = 7
    assert base[3, 1].item() == 7 and base[1, 3].item() == 7 and base.sum().item() == 14
    b = ember.zeros(3, dtype=ember.bool)
    b[[0, 2]] = True
    assert b.tolist() == [True, False, True]
    x = ember.tensor([1.0, -2.0, 3.0, -4.0])
    x[x < 0] = 0
    assert x.tolist() == [1.0, 0.0, 3.0, 0.0]


def test_a_write_through_an_index_makes_saved_tensors_stale():
    w = ember.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = ember.tensor([1.0, 2.0, 3.0])
    y = (w * x).sum()
    x[[0]] = 5.0
    with pytest.raises(RuntimeError, match="modified"):
        y.backward()


def test_advanced_index_errors():
    x = ember.from_numpy(A.copy())
    with pytest.raises(IndexError, match=r"the shape of the mask \[4,5\] at index 0 does not match"):
        x[ember.from_numpy(A[0, 0] > 0)]
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x[:, [0, 3]]
    with pytest.raises(IndexError, match=r"could not be broadcast together with shapes \[2\], \[3\]"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="must be int64 \\(long\\) or bool tensors, got float32"):
        x[ember.tensor([0.0])]
    with pytest.raises(IndexError, match="too many indices"):
        x[ember.from_numpy(A > 0), 0]
    w = ember.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        w[[0]] = 2.0
    with ember.no_grad():
        w[[0]] = 2.0
    assert w.tolist() == [2.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="copy_"):
        ember.zeros(3)[[0, 1]] = ember.ones(3)
