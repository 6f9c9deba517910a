"""t[index] against NumPy's basic indexing: ints (negative too), slices with steps, None,
..., one int64 index tensor or list; t[index] = value writes into the view. Advanced
indexing against PyTorch's is in test_indexing_advanced.py."""

import numpy as np
import pytest

import ember

A = np.arange(2 * 3 * 5, dtype=np.float64).reshape(2, 3, 5)


@pytest.mark.parametrize("index", [
    0, -1, (1, 2), (1, -1, -2), slice(None), slice(1, None), (slice(None), slice(0, 3, 2)),
    (Ellipsis, 1), (Ellipsis, slice(1, 4, 2)), (None, 0), (0, None, slice(None, None, 3)),
    (slice(None), None, 1, Ellipsis), (1, Ellipsis, None), (slice(-2, None), 2), (slice(10, 20),),
    (slice(None), slice(1, 3), [4, 0, -1]), ([1, 0],), (Ellipsis, [[0, 1], [2, 2]]),
])
def test_indexing_matches_numpy(index):
    t = ember.from_numpy(A)
    got = t[index]
    want = A[index]
    assert got.shape == want.shape
    assert got.tolist() == want.tolist()


def test_an_int_selects_before_an_index_tensor_as_in_pytorch():
    # NumPy would move the list's dim first: an int and a list apart are both advanced there
    t = ember.from_numpy(A)
    assert t[0, :, [4, 0, -1]].tolist() == [[4, 0, 4], [9, 5, 9], [14, 10, 14]]


def test_basic_indexing_gives_views():
    t = ember.from_numpy(A.copy())
    assert t[1, :, ::2].data_ptr() == t.data_ptr() + (1 * 15) * 8
    assert t[0].data_ptr() == t.data_ptr()


def test_index_tensor_picks_along_its_dim():
    t = ember.from_numpy(A)
    idx = ember.tensor([[0, 2], [1, 1]])
    assert t[:, idx].tolist() == A[:, np.array([[0, 2], [1, 1]])].tolist()


def test_assignment_writes_into_the_view():
    t = ember.zeros(3, 4)
    t[1] = 5
    t[:, 0] = ember.tensor([1.0, 2.0, 3.0])
    t[2, 1:3] = ember.tensor(7.0)
    assert t.tolist() == [[1, 0, 0, 0], [2, 5, 5, 5], [3, 7, 7, 0]]


def test_index_errors():
    t = ember.zeros(2, 3)
    with pytest.raises(IndexError, match="index 2 is out of range for dim 0 of size 2"):
        t[2]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        t[0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-1]
    with pytest.raises(TypeError, match="indexing with an object of type str is not supported"):
        t["a"]


def test_iterating_gives_the_rows():
    rows = list(ember.from_numpy(A)[0])
    assert len(rows) == 3 and rows[2].tolist() == A[0, 2].tolist()
