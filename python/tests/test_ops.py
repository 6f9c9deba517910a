"""Ops and operators against NumPy's values: elementwise, reductions with dim and
keepdim, matrix products, softmax, selection, joining; ember's rule of no dtype
promotion."""

import numpy as np
import pytest

import ember

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((3, 4))
P = RNG.uniform(0.5, 2.0, (3, 4))


def t(a):
    return ember.tensor(a.tolist(), dtype=ember.float64)


def close(x, expected):
    np.testing.assert_allclose(np.array(x.tolist()), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,ref", [
    ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("abs", np.abs), ("tanh", np.tanh),
    ("sin", np.sin), ("cos", np.cos), ("neg", np.negative), ("square", np.square),
    ("rsqrt", lambda a: 1 / np.sqrt(a)), ("sigmoid", lambda a: 1 / (1 + np.exp(-a))),
    ("relu", lambda a: np.maximum(a, 0)),
])
def test_unary_ops_as_functions_and_methods(name, ref):
    close(getattr(ember, name)(t(P)), ref(P))
    close(getattr(t(P), name)(), ref(P))


def test_binary_ops_and_operators_with_tensors_and_numbers():
    a, b = t(A), t(B)
    close(a + b, A + B)
    close(a - b, A - B)
    close(a * b, A * B)
    close(a / b, A / B)
    close(t(P) ** t(P), P ** P)
    close(a + 2, A + 2)
    close(2 + a, 2 + A)
    close(a - 1.5, A - 1.5)
    close(1.5 - a, 1.5 - A)
    close(a * 3, A * 3)
    close(3 * a, 3 * A)
    close(a / 4, A / 4)
    close(4 / a, 4 / A)
    close(t(P) ** 2, P ** 2)
    close(2 ** t(P), 2 ** P)
    close(-a, -A)
    close(abs(a), np.abs(A))
    close(ember.maximum(a, b), np.maximum(A, B))
    close(ember.minimum(a, b), np.minimum(A, B))
    close(ember.add(a, b), A + B)
    close(a.mul(b), A * B)
    close(a + t(B[0]), A + B[0])  # broadcasting


def test_in_place_operators_write_into_the_tensor():
    a = t(A)
    before = a.data_ptr()
    a += 1
    a *= t(B)
    assert a.data_ptr() == before
    close(a, (A + 1) * B)


def test_comparisons_give_bool_tensors():
    a, b = t(A), t(B)
    for got, want in [(a == b, A == B), (a != b, A != B), (a < b, A < B), (a <= b, A <= B),
                      (a > b, A > B), (a >= b, A >= B), (a > 0, A > 0), (ember.lt(a, 0.5), A < 0.5)]:
        assert got.dtype == ember.bool
        assert got.tolist() == want.tolist()
    m = a > 0
    assert (~m).tolist() == (~(A > 0)).tolist()
    assert (m & (b > 0)).tolist() == ((A > 0) & (B > 0)).tolist()
    assert (m | (b > 0)).tolist() == ((A > 0) | (B > 0)).tolist()
    assert (a == None) is False  # noqa: E711 - not a tensor: Python's identity
    assert ember.allclose(a, a + 1e-12) and not ember.equal(a, b)


def test_reductions_with_dim_and_keepdim():
    a = t(A)
    close(a.sum(), A.sum())
    close(ember.sum(a, 1), A.sum(1))
    close(a.sum(dim=(0, 1)), A.sum((0, 1)))
    close(a.mean(0, keepdim=True), A.mean(0, keepdims=True))
    assert a.sum(1, keepdim=True).shape == (3, 1)
    close(a.amax(1), A.max(1))
    close(a.amin(), A.min())
    close(a.max(), A.max())
    values, indices = a.max(1)
    close(values, A.max(1))
    assert indices.tolist() == A.argmax(1).tolist()
    assert a.min(dim=0).indices.tolist() == A.argmin(0).tolist()
    close(a.min(0).values, A.min(0))
    close(ember.max(a, t(B)), np.maximum(A, B))
    assert a.argmax().item() == A.argmax()
    assert a.argmin(1).tolist() == A.argmin(1).tolist()
    close(a.var(1), A.var(1, ddof=1))
    close(a.var(1, unbiased=False), A.var(1))
    close(a.std(), A.std(ddof=1))
    close(a.norm(), np.linalg.norm(A))
    close(ember.logsumexp(a, 1), np.log(np.exp(A).sum(1)))
    close(a.cumsum(1), A.cumsum(1))
    assert ember.tensor([True, True, False]).sum().item() == 2


def test_matrix_products_and_softmax():
    a, b = t(A), t(B)
    close(a @ b.t(), A @ B.T)
    close(ember.matmul(a, b.T), A @ B.T)
    close(a.mm(b.t()), A @ B.T)
    # mm takes matrices and bmm batches of them, as PyTorch's: no broadcasting
    x3, y3 = ember.ones(2, 3, 4), ember.ones(2, 4, 5)
    assert x3.bmm(y3).shape == (2, 3, 5) and ember.bmm(x3, y3).tolist() == (x3 @ y3).tolist()
    with pytest.raises(RuntimeError, match=r"^mm: expected two 2-D tensors, got shapes \[2,3,4\] and \[2,4,5\]"):
        x3.mm(y3)
    with pytest.raises(RuntimeError, match=r"^bmm: expected two 3-D tensors .* got shapes \[2,3,4\] and \[4,5\]"):
        x3.bmm(ember.ones(4, 5))
    with pytest.raises(RuntimeError, match=r"^bmm: .* got shapes \[2,3,4\] and \[3,4,5\]"):
        x3.bmm(ember.ones(3, 4, 5))
    with pytest.raises(RuntimeError, match=r"^mm: shapes \[2,3\] and \[2,3\] cannot be multiplied"):
        ember.ones(2, 3).mm(ember.ones(2, 3))
    e = np.exp(A - A.max(1, keepdims=True))
    close(ember.softmax(a, 1), e / e.sum(1, keepdims=True))
    close(a.log_softmax(-1), np.log(e / e.sum(1, keepdims=True)))
    close(ember.outer(t(A[0]), t(B[0])), np.outer(A[0], B[0]))
    close(ember.tril(a), np.tril(A))
    close(a.triu(1), np.triu(A, 1))
    close(ember.trace(a), np.trace(A))


def test_selection_and_joining():
    a, b = t(A), t(B)
    m = a > 0
    close(a.masked_fill(m, 0.0), np.where(A > 0, 0.0, A))
    close(ember.where(m, a, b), np.where(A > 0, A, B))
    close(ember.where(m, a, -1.0), np.where(A > 0, A, -1.0))
    close(ember.cat([a, b], 0), np.concatenate([A, B], 0))
    close(ember.cat((a, b), dim=1), np.concatenate([A, B], 1))
    close(ember.stack([a, b], 1), np.stack([A, B], 1))
    parts = a.split(2, 1)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(3, 2), (3, 2)]
    assert [p.shape for p in ember.split(a, [1, 3], 1)] == [(3, 1), (3, 3)]
    assert [p.shape for p in a.chunk(3)] == [(1, 4)] * 3
    idx = ember.tensor([2, 0])
    close(a.index_select(0, idx), A[[2, 0]])
    close(ember.gather(a, 1, ember.tensor([[0], [1], [3]])), np.take_along_axis(A, np.array([[0], [1], [3]]), 1))


def test_no_dtype_promotion_is_an_error():
    with pytest.raises(RuntimeError, match="add"):
        ember.ones(2) + ember.ones(2, dtype=ember.float64)
    with pytest.raises(RuntimeError):
        ember.tensor([1, 2]) / 2
