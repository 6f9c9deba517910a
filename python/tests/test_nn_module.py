"""nn.Module subclassed in Python, with Python parameters and C++ layers as children:
registration, dotted names, state_dict, modes, hooks, to(dtype); the C++ layers on their
own against PyTorch's."""

import numpy as np
import pytest

import ember
import ember.nn as nn

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

RNG = np.random.default_rng(11)


def f64(a, requires_grad=False):
    return ember.tensor(np.asarray(a).tolist(), dtype=ember.float64, requires_grad=requires_grad)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(ember.ones(3, dtype=ember.float64))
        self.lin = nn.Linear(4, 3, dtype=ember.float64, generator=ember.Generator(0))
        self.block = nn.Sequential(nn.LayerNorm(3, dtype=ember.float64), nn.Dropout(0.5))
        self.register_buffer("offset", ember.zeros(3, dtype=ember.float64))
        self.not_registered = ember.ones(2)

    def forward(self, x):
        return self.block(self.lin(x) * self.scale) + self.offset


def test_parameters_of_python_and_cpp_modules_have_dotted_names():
    m = Model()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "lin.weight", "lin.bias", "block.0.weight", "block.0.bias"]
    assert len(list(m.parameters())) == 5
    assert [n for n, _ in m.named_children()] == ["lin", "block"]
    assert len(list(m.modules())) == 5
    assert isinstance(m.scale, nn.Parameter) and m.scale.requires_grad and m.scale.is_leaf
    assert list(m.state_dict()) == names[:1] + ["offset"] + names[1:]
    assert m.lin.weight.shape == (3, 4) and m.lin.in_features == 4


def test_gradients_reach_python_and_cpp_parameters():
    m = Model().eval()
    m(f64(RNG.standard_normal((2, 4)))).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_train_and_eval_reach_the_cpp_layers():
    m = Model()
    assert m.training and m.block[1].training
    m.eval()
    assert not m.training and not m.block[1].training and not m.block[1]._impl.training
    x = f64(RNG.standard_normal((2, 4)))
    assert ember.equal(m(x), m(x))  # no dropout in eval mode
    m.train()
    assert m.block[1]._impl.training


def test_state_dict_round_trip():
    a, b = Model(), Model()
    with ember.no_grad():
        a.scale.fill_(2.0)
        a.offset.fill_(0.5)
    missing, unexpected = b.load_state_dict(a.state_dict())
    assert missing == [] and unexpected == []
    x = f64(RNG.standard_normal((2, 4)))
    assert ember.equal(a.eval()(x), b.eval()(x))
    assert b.scale.tolist() == [2.0, 2.0, 2.0]


def test_load_state_dict_names_every_problem():
    m = Model()
    state = dict(m.state_dict())
    del state["scale"]
    state["extra"] = ember.ones(1)
    with pytest.raises(RuntimeError, match='missing key "scale".*unexpected key "extra"'):
        m.load_state_dict(state)
    result = m.load_state_dict(state, strict=False)
    assert result.missing_keys == ["scale"] and result.unexpected_keys == ["extra"]
    state["lin.weight"] = ember.ones(2, 2, dtype=ember.float64)
    with pytest.raises(RuntimeError, match="lin.weight"):
        m.load_state_dict(state, strict=False)


def test_forward_hooks_see_and_may_replace_the_output():
    m = Model().eval()
    seen = []
    handle = m.lin.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    replace = m.register_forward_hook(lambda mod, args, out: out * 0.0)
    y = m(f64(RNG.standard_normal((2, 4))))
    assert seen == [(2, 3)] and y.abs().sum().item() == 0
    handle.remove()
    replace.remove()
    m(f64(RNG.standard_normal((2, 4))))
    assert len(seen) == 1


def test_to_converts_in_place_keeping_the_handles():
    m = Model()
    params = list(m.parameters())
    m.to(ember.float32)
    assert all(p.dtype == ember.float32 for p in m.parameters())
    assert all(p.dtype == ember.float32 for p in params)  # the same tensors
    assert m.offset.dtype == ember.float32
    m(ember.ones(2, 4))
    # as PyTorch's: a device ("cpu", the only one), a device and a dtype, another tensor
    assert m.to("cpu") is m and all(p.dtype == ember.float32 for p in params)
    assert m.to("cpu", ember.float64) is m and all(p.dtype == ember.float64 for p in params)
    m.to(device="cpu", dtype=ember.float32, non_blocking=True)
    assert all(p.dtype == ember.float32 for p in params)
    m.to(ember.zeros(1, dtype=ember.float64))
    assert all(p.dtype == ember.float64 for p in params)
    with pytest.raises(ValueError, match="^to: ember computes on the CPU"):
        m.to("cuda")
    with pytest.raises(TypeError, match="^to: got an unexpected keyword argument 'copy'"):
        m.to(ember.float32, copy=True)
    assert all(p.dtype == ember.float64 for p in params)  # (refused: nothing changed)


def test_assignment_rules():
    m = Model()
    with pytest.raises(TypeError, match="parameter 'scale'"):
        m.scale = ember.ones(3)
    m.scale = None
    assert "scale" not in dict(m.named_parameters())

    class NoInit(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(ember.ones(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        NoInit()


def test_tied_parameters_are_listed_once():
    m = nn.Module()
    m.a = nn.Parameter(ember.ones(2))
    m.b = m.a
    assert [n for n, _ in m.named_parameters()] == ["a"]


@needs_torch
def test_multihead_attention_matches_pytorch_with_masks_and_weights():
    E, H, kdim, vdim = 8, 2, 6, 5
    mha = nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, dtype=ember.float64,
                                generator=ember.Generator(2))
    t = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, batch_first=True, dtype=torch.float64)
    p = {n: torch.tensor(v.numpy()) for n, v in mha.state_dict().items()}
    with torch.no_grad():
        t.q_proj_weight.copy_(p["q_proj.weight"])
        t.k_proj_weight.copy_(p["k_proj.weight"])
        t.v_proj_weight.copy_(p["v_proj.weight"])
        t.in_proj_bias.copy_(torch.cat([p["q_proj.bias"], p["k_proj.bias"], p["v_proj.bias"]]))
        t.out_proj.weight.copy_(p["out_proj.weight"])
        t.out_proj.bias.copy_(p["out_proj.bias"])
    q, k, v = RNG.standard_normal((2, 3, E)), RNG.standard_normal((2, 4, kdim)), RNG.standard_normal((2, 4, vdim))
    pad = np.array([[False, False, False, True], [False, False, False, False]])
    attn = np.array([[False, True, False, False]] * 3)
    for average in (True, False):
        out, w = mha(f64(q), f64(k), f64(v), key_padding_mask=ember.tensor(pad.tolist()),
                     attn_mask=ember.tensor(attn.tolist()), average_attn_weights=average)
        tout, tw = t(torch.tensor(q), torch.tensor(k), torch.tensor(v), key_padding_mask=torch.tensor(pad),
                     attn_mask=torch.tensor(attn), average_attn_weights=average)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=0, atol=1e-12)
    out, w = mha(f64(q), f64(k), f64(v), need_weights=False)
    assert w is None


def copy_attention(t_attn, p, prefix):
    """ember's q/k/v projections into PyTorch's packed in_proj."""
    t_attn.in_proj_weight.copy_(torch.cat([p[prefix + s + "_proj.weight"] for s in "qkv"]))
    t_attn.in_proj_bias.copy_(torch.cat([p[prefix + s + "_proj.bias"] for s in "qkv"]))
    t_attn.out_proj.weight.copy_(p[prefix + "out_proj.weight"])
    t_attn.out_proj.bias.copy_(p[prefix + "out_proj.bias"])


def torch_layer(layer, t, norms):
    """PyTorch's layer t with the values of ember's layer."""
    p = {n: torch.tensor(v.numpy()) for n, v in layer.state_dict().items()}
    with torch.no_grad():
        copy_attention(t.self_attn, p, "self_attn.")
        if hasattr(t, "multihead_attn"):
            copy_attention(t.multihead_attn, p, "cross_attn.")
        for name in ["linear1", "linear2"]:
            getattr(t, name).weight.copy_(p["ffn." + name + ".weight"])
            getattr(t, name).bias.copy_(p["ffn." + name + ".bias"])
        for name in norms:
            getattr(t, name).weight.copy_(p[name + ".weight"])
            getattr(t, name).bias.copy_(p[name + ".bias"])
    return t  # in training mode (dropout is 0): PyTorch's eval fast path zeroes padding


@needs_torch
def test_encoder_layer_matches_pytorch():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, dtype=ember.float64,
                                       generator=ember.Generator(4))
    t = torch_layer(layer, torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                                            batch_first=True, dtype=torch.float64),
                    ["norm1", "norm2"])
    x = RNG.standard_normal((2, 5, 8))
    pad = np.array([[False] * 5, [False] * 3 + [True] * 2])
    y = layer(f64(x), src_key_padding_mask=ember.tensor(pad.tolist()))
    ty = t(torch.tensor(x), src_key_padding_mask=torch.tensor(pad))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=0, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_pytorch(norm_first):
    layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation="gelu",
                                       norm_first=norm_first, dtype=ember.float64,
                                       generator=ember.Generator(5))
    t = torch_layer(layer, torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                                            activation="gelu", norm_first=norm_first,
                                                            batch_first=True, dtype=torch.float64),
                    ["norm1", "norm2", "norm3"])
    x, memory = RNG.standard_normal((2, 4, 8)), RNG.standard_normal((2, 5, 8))
    pad = np.array([[False] * 5, [False] * 2 + [True] * 3])
    y = layer(f64(x), f64(memory), memory_key_padding_mask=ember.tensor(pad.tolist()), tgt_is_causal=True)
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)  # True = blocked
    ty = t(torch.tensor(x), torch.tensor(memory), tgt_mask=causal, memory_key_padding_mask=torch.tensor(pad))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=0, atol=1e-12)


def test_decoder_layer_and_transformer_run_with_pytorch_aliases():
    dec = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, dtype=ember.float64)
    assert nn.DecoderLayer is nn.TransformerDecoderLayer
    y = dec(f64(RNG.standard_normal((2, 3, 8))), f64(RNG.standard_normal((2, 4, 8))), tgt_is_causal=True)
    assert y.shape == (2, 3, 8)
    assert "cross_attn.q_proj.weight" in dict(dec.named_parameters())
    model = nn.Transformer(10, 12, d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    logits = model(ember.tensor([[1, 2, 3, 0]]), ember.tensor([[1, 4, 5]]))
    assert logits.shape == (1, 3, 12)
    with pytest.raises(ValueError, match="batch-first"):
        nn.MultiheadAttention(8, 2, batch_first=False)


def test_qk_norm_reaches_every_attention_and_its_derivatives_check():
    mha = nn.MultiheadAttention(8, 2, qk_norm=True, generator=ember.Generator(1), dtype=ember.float64)
    assert isinstance(mha.q_norm, nn.LayerNorm) and mha.k_norm.weight.shape == (4,)
    assert nn.MultiheadAttention(8, 2).q_norm is None
    names = [n for n, _ in mha.named_parameters()]
    assert names[-4:] == ["q_norm.weight", "q_norm.bias", "k_norm.weight", "k_norm.bias"]
    x = f64(RNG.standard_normal((2, 3, 8))).requires_grad_()
    f = lambda a: mha(a, a, a, need_weights=False)[0]
    assert ember.autograd.gradcheck(f, [x], check_forward_ad=True).passed
    assert ember.autograd.gradgradcheck(f, [x]).passed
    layer = nn.TransformerEncoderLayer(8, 2, 16, qk_norm=True)
    assert "self_attn.k_norm.bias" in dict(layer.named_parameters())
    dec = nn.TransformerDecoderLayer(8, 2, 16, qk_norm=True)
    assert "cross_attn.q_norm.weight" in dict(dec.named_parameters())
    model = nn.Transformer(10, 12, d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, qk_norm=True)
    assert "decoder.layers.0.self_attn.q_norm.weight" in dict(model.named_parameters())
    assert model(ember.tensor([[1, 2, 3, 0]]), ember.tensor([[1, 4, 5]])).shape == (1, 3, 12)


def test_embedding_and_dropout_modules():
    emb = nn.Embedding(10, 4, padding_idx=0)
    out = emb(ember.tensor([[0, 3], [9, 0]]))
    assert out.shape == (2, 2, 4) and out[0, 0].abs().sum().item() == 0
    drop = nn.Dropout(0.5, generator=ember.Generator(3))
    assert ember.equal(drop.eval()(out), out)


def test_cpp_layers_sub_layers_are_modules():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, generator=ember.Generator(0), dtype=ember.float64)
    attn = layer.self_attn
    assert isinstance(attn, nn.MultiheadAttention) and attn is layer.self_attn
    assert attn.num_heads == 2 and isinstance(attn.q_proj, nn.Linear)
    names = [n for n, _ in layer.named_modules()]
    assert "self_attn" in names and "self_attn.q_proj" in names and "norm1" in names
    assert [n for n, m in layer.named_modules() if isinstance(m, nn.MultiheadAttention)] == ["self_attn"]
    # the tensors are listed once, under the layer's names, as before
    assert [n for n, _ in layer.named_parameters()] == [n for n, _ in layer._impl.named_parameters()]
    assert list(layer.state_dict()) == [n for n, _ in layer._own_state()]
    # the sub-layer's parameters are the layer's
    assert attn.q_proj.weight.data_ptr() == dict(layer.named_parameters())["self_attn.q_proj.weight"].data_ptr()
    # modes follow the C++ modules
    layer.eval()
    assert not layer.training and not attn.training and not attn.q_proj.training
    layer.train()
    assert attn.training
    with pytest.raises(RuntimeError, match="self_attn of TransformerEncoderLayer, a C\\+\\+ layer that calls it"):
        attn.register_forward_hook(lambda m, a, o: None)
    # a Python model sees the whole tree
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = layer
            self.head = nn.Linear(8, 3, dtype=ember.float64)

    m = M()
    assert [n for n, mod in m.named_modules() if isinstance(mod, nn.MultiheadAttention)] == ["enc.self_attn"]
    assert len(list(m.parameters())) == len(list(layer.parameters())) + 2
    assert "(self_attn): MultiheadAttention" in repr(m)
