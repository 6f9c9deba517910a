"""Tensors from Python: creation and dtype inference, metadata, printing, values, views."""

import pytest

import ember


def test_tensor_infers_dtypes_as_pytorch():
    assert ember.tensor([1.0, 2.0]).dtype == ember.float32
    assert ember.tensor([1, 2]).dtype == ember.int64
    assert ember.tensor([True, False]).dtype == ember.bool
    assert ember.tensor([1, 2.5]).dtype == ember.float32
    assert ember.tensor([True, 2]).dtype == ember.int64
    assert ember.tensor([[1, 2]], dtype=ember.float64).dtype == ember.float64


def test_tensor_from_nested_lists_and_scalars():
    t = ember.tensor([[1, 2, 3], [4, 5, 6]])
    assert t.shape == (2, 3)
    assert t.ndim == 2 and t.dim() == 2 and t.numel() == 6
    assert t.size() == (2, 3) and t.size(1) == 3 and t.size(-2) == 2
    assert t.tolist() == [[1, 2, 3], [4, 5, 6]]
    s = ember.tensor(2.5)
    assert s.shape == () and s.item() == 2.5
    assert ember.tensor([]).shape == (0,)


def test_tensor_takes_numbers_of_other_libraries_by_their_value():
    # integers by operator.index; PyTorch's float tensors have __index__ too, but it refuses
    # them: they are reals, not truncated to int64
    np = pytest.importorskip("numpy")
    assert ember.tensor([np.int64(3), np.int32(-2)]).tolist() == [3, -2]
    assert ember.tensor(np.float32(0.5)).dtype == ember.float32
    torch = pytest.importorskip("torch")
    t = ember.tensor(torch.tensor(2.75, dtype=torch.float64))
    assert t.dtype == ember.float64 and t.item() == 2.75
    assert ember.tensor([torch.tensor(1.5), torch.tensor(2.5)]).tolist() == [1.5, 2.5]
    assert ember.tensor(torch.tensor(1.5, dtype=torch.bfloat16)).item() == 1.5
    i = ember.tensor([torch.tensor(7), torch.tensor(-1)])
    assert i.dtype == ember.int64 and i.tolist() == [7, -1]
    # another library's tensor keeps its dtype and shape, copied (through DLPack where it can)
    src = torch.tensor([[1.5, 2.5]], dtype=torch.float64)
    copied = ember.tensor(src)
    src[0, 0] = 9.0
    assert copied.dtype == ember.float64 and copied.tolist() == [[1.5, 2.5]]
    assert ember.tensor(torch.ones(2, dtype=torch.bfloat16)).dtype == ember.bfloat16
    assert ember.tensor(torch.ones(2, requires_grad=True)).tolist() == [1.0, 1.0]
    assert ember.tensor(torch.tensor([1, 2], dtype=torch.int32)).dtype == ember.int64
    # another library's arrays keep their shape, bools stay bools
    assert ember.tensor(torch.tensor([7])).shape == (1,) and ember.tensor(torch.tensor([[7.5]])).shape == (1, 1)
    assert ember.tensor([torch.ones(2), torch.zeros(2)]).tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert ember.tensor(np.bool_(True)).dtype == ember.bool and ember.tensor(torch.tensor(True)).dtype == ember.bool
    assert ember.tensor([True, np.bool_(False)]).tolist() == [True, False]
    for z in (1 + 2j, np.complex128(1 + 2j), torch.tensor(1 + 2j)):
        with pytest.raises(TypeError, match="^tensor: expected real numbers, got the complex"):
            ember.tensor(z)

    class Interrupting:  # an error of __index__'s own is not taken for "not an integer"
        def __index__(self):
            raise KeyboardInterrupt

        def __float__(self):
            return 1.0

    with pytest.raises(KeyboardInterrupt):
        ember.tensor([Interrupting()])


def test_ragged_lists_are_refused():
    with pytest.raises(ValueError, match="expected sequence of length 2 at dim 1"):
        ember.tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="could not convert"):
        ember.tensor(["a"])


def test_dtype_objects_print_as_torch():
    assert repr(ember.float32) == "ember.float32"
    assert repr(ember.int64) == "ember.int64"
    assert ember.float64.is_floating_point and not ember.bool.is_floating_point
    assert ember.float == ember.float32 and ember.long == ember.int64
    assert len({ember.float32, ember.float32, ember.int64}) == 2


def test_factories():
    assert ember.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert ember.ones((2,), dtype=ember.int64).tolist() == [1, 1]
    assert ember.full((2, 2), 7).dtype == ember.int64
    assert ember.full((2,), 0.5).tolist() == [0.5, 0.5]
    assert ember.empty(3, 4).shape == (3, 4)
    assert ember.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert ember.arange(5).dtype == ember.int64
    assert ember.arange(0.0, 3.0).dtype == ember.float32
    assert ember.arange(1, 7, 2).tolist() == [1, 3, 5]
    assert ember.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert ember.zeros_like(ember.eye(2, dtype=ember.float64)).dtype == ember.float64
    assert ember.ones(2, requires_grad=True).requires_grad
    like = ember.zeros(2, 3, dtype=ember.float64)
    assert ember.empty_like(like).shape == (2, 3) and ember.empty_like(like).dtype == ember.float64
    r = ember.rand_like(like, generator=ember.Generator(1))
    assert r.dtype == ember.float64 and r.tolist() == ember.rand(2, 3, dtype=ember.float64,
                                                               generator=ember.Generator(1)).tolist()
    n = ember.randn_like(like, dtype=ember.float32, requires_grad=True)
    assert n.shape == (2, 3) and n.dtype == ember.float32 and n.requires_grad


def test_tolist_refuses_lists_nested_deeper_than_python_handles():
    deep = ember.ones(1).reshape(*[1] * 500).tolist()
    for _ in range(500):
        assert isinstance(deep, list) and len(deep) == 1
        deep = deep[0]
    assert deep == 1.0
    with pytest.raises(ValueError, match="^tolist: a tensor of 100000 dims would nest lists 100000 deep"):
        ember.ones(1).reshape(*[1] * 100000).tolist()


def test_randint_takes_a_dtype():
    i = ember.randint(3, 10, (1000,), generator=ember.Generator(2))
    f = ember.randint(3, 10, (1000,), generator=ember.Generator(2), dtype=ember.float64)
    assert i.dtype == ember.int64 and f.dtype == ember.float64 and f.tolist() == [float(v) for v in i.tolist()]
    assert min(i.tolist()) >= 3 and max(i.tolist()) <= 9
    assert ember.randint(5, (2,), dtype=ember.int64).dtype == ember.int64
    # a float dtype only where it holds [low, high) exactly: none rounds up to high
    b = ember.randint(0, 256, (4000,), dtype=ember.bfloat16, generator=ember.Generator(3)).float()
    assert max(b.tolist()) <= 255
    with pytest.raises(ValueError, match=r"^randint: bfloat16 holds the whole numbers exactly only in \[-2\^8, 2\^8\]"):
        ember.randint(0, 300, (3,), dtype=ember.bfloat16)
    with pytest.raises(ValueError, match=r"^randint: float32 holds"):
        ember.randint(0, 2**25, (3,), dtype=ember.float32)
    with pytest.raises(TypeError, match="^randint: expected dtype int64 or a float dtype, got bool"):
        ember.randint(0, 2, (3,), dtype=ember.bool)
    with pytest.raises(TypeError, match="^randint: expected an integer, got 0.5 of type float"):
        ember.randint(0.5, 3, (2,))
    with pytest.raises(OverflowError, match="^randint: the integer 18446744073709551616 does not fit int64"):
        ember.randint(0, 2**64, (2,))


def test_random_tensors_follow_their_generator():
    a = ember.randn(3, 4, generator=ember.Generator(7), dtype=ember.float64)
    b = ember.randn(3, 4, generator=ember.Generator(7), dtype=ember.float64)
    assert a.tolist() == b.tolist() and a.dtype == ember.float64
    ember.manual_seed(3)
    c = ember.rand(5)
    ember.manual_seed(3)
    assert ember.rand(5).tolist() == c.tolist()
    assert all(0 <= v < 1 for v in c.tolist())
    g = ember.Generator()
    g.manual_seed(7)
    assert ember.randn(3, 4, generator=g, dtype=ember.float64).tolist() == a.tolist()
    r = ember.randint(2, 5, (100,), generator=ember.Generator(1))
    assert r.dtype == ember.int64 and 2 <= r.min().item() and r.max().item() < 5
    ember.manual_seed(4)  # the default generator, as randn's
    d = ember.randint(10, (6,))
    ember.manual_seed(4)
    assert ember.randint(10, (6,), generator=None).tolist() == d.tolist()
    with pytest.raises(TypeError, match="randint: generator must be an ember.Generator or None, got int"):
        ember.randint(10, (6,), generator=3)


def test_repr_is_the_cpp_printer():
    assert repr(ember.tensor([1.5, 2.0])) == "tensor([1.5000, 2.0000], shape=[2], dtype=float32)"
    assert str(ember.tensor(3)) == "tensor(3, shape=[], dtype=int64)"
    assert "requires_grad=True" in repr(ember.ones(1, requires_grad=True))


def test_print_options():
    try:
        ember.set_printoptions(precision=2)
        assert repr(ember.tensor([1.5, 2.0])) == "tensor([1.50, 2.00], shape=[2], dtype=float32)"
    finally:
        ember.set_printoptions(precision=4)
    with pytest.raises(RuntimeError, match="set_printoptions"):
        ember.set_printoptions(precision=-1)


def test_item_and_python_numbers():
    assert ember.tensor(3).item() == 3 and isinstance(ember.tensor(3).item(), int)
    assert isinstance(ember.tensor(True).item(), bool)
    assert float(ember.tensor([2.5])) == 2.5 and int(ember.tensor(4)) == 4
    assert [10, 20, 30][ember.tensor(1)] == 20
    assert bool(ember.tensor(1.0)) and len(ember.zeros(4, 2)) == 4
    with pytest.raises(ValueError, match="ambiguous"):
        bool(ember.zeros(2))
    with pytest.raises(ValueError, match="2 elements"):
        ember.zeros(2).item()
    # format specs, as PyTorch's: a 0-d tensor formats as its value
    assert f"{ember.tensor(2.0) / 3:.3f}" == "0.667" and f"{ember.tensor(7):04d}" == "0007"
    assert f"{ember.ones(2)}" == str(ember.ones(2)) and format(ember.tensor(1.5)) == "1.5"
    with pytest.raises(TypeError):
        f"{ember.ones(2):.3f}"


def test_views_share_memory_and_have_torch_shapes():
    m = ember.arange(12, dtype=ember.float32)
    v = m.view(3, 4)
    assert v.shape == (3, 4) and m.reshape((4, 3)).shape == (4, 3) and m.view(-1, 6).shape == (2, 6)
    assert v.transpose(0, 1).shape == (4, 3) and v.t().shape == (4, 3) and v.T.shape == (4, 3)
    assert v.permute(1, 0).shape == (4, 3) and not v.permute(1, 0).is_contiguous()
    assert v.unsqueeze(0).shape == (1, 3, 4) and v.unsqueeze(0).squeeze().shape == (3, 4)
    assert v.narrow(1, 1, 2).tolist() == [[1, 2], [5, 6], [9, 10]]
    assert v.select(0, 2).tolist() == [8, 9, 10, 11]
    assert ember.ones(1, 3).expand(2, 3).shape == (2, 3)
    assert v.flatten().shape == (12,) and v.diagonal().tolist() == [0, 5, 10]
    assert v.data_ptr() == m.data_ptr() and v.t().contiguous().data_ptr() != m.data_ptr()
    v.select(0, 0).fill_(-1)
    assert m[0].item() == -1
    assert v.clone().data_ptr() != v.data_ptr()
    assert v.to(ember.float64).dtype == ember.float64 and v.long().dtype == ember.int64


def test_autograd_state_of_a_tensor():
    x = ember.ones(2).requires_grad_()
    assert x.requires_grad and x.is_leaf and x.grad_fn is None and x.grad is None
    y = x * 2
    assert not y.is_leaf and y.grad_fn.name() == "mul"
    d = y.detach()
    assert not d.requires_grad and d.data_ptr() == y.data_ptr()
    z = ember.zeros(2)
    z.requires_grad = True
    assert z.requires_grad


def test_to_takes_what_pytorch_takes():
    x = ember.ones(2)
    assert x.to(ember.float64).dtype == ember.float64 and x.to(dtype=ember.int64).dtype == ember.int64
    assert x.to("cpu").data_ptr() == x.data_ptr() and x.to("cpu", ember.float64).dtype == ember.float64
    assert x.to(device="cpu:0", dtype=ember.float64).dtype == ember.float64
    assert x.to(ember.zeros(1, dtype=ember.float64)).dtype == ember.float64  # another tensor's dtype
    assert x.to(ember.float32).data_ptr() == x.data_ptr()
    y = x.to(ember.float32, copy=True)
    y[0] = 5.0
    assert x.tolist() == [1.0, 1.0] and y.tolist() == [5.0, 1.0]
    assert x.to(ember.float32, non_blocking=True).dtype == ember.float32
    torch = pytest.importorskip("torch")
    assert x.to(torch.device("cpu")).dtype == ember.float32
    with pytest.raises(ValueError, match=r"^to: ember computes on the CPU; expected device 'cpu' \(or 'cpu:<n>'\), got 'cuda:0'"):
        x.to(torch.device("cuda:0"))
    with pytest.raises(ValueError, match="got 'meta'"):
        x.to("meta")
    with pytest.raises(TypeError, match="^to: expected a dtype, a device .* got int"):
        x.to(3)
    for bad in ("cpu:abc", "cpu:-1", "cpu:0 ", "float64"):
        with pytest.raises(ValueError, match="^to: ember computes on the CPU"):
            x.to(bad)
    with pytest.raises(TypeError, match="^to: expected a dtype, a device .* got Tensor"):
        x.to(torch.ones(1))  # (a PyTorch tensor: its .type is a method, not a device's)
