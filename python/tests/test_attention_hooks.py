"""Attention hooks on ember's MultiheadAttention from Python, and the attention watch's
per-head statistics computed from what they hand over."""

import math

import numpy as np
import pytest

import ember
import ember.nn as nn

f64 = ember.float64


def mha_and_inputs(seed=0, L=3, S=5):
    g = ember.Generator(seed)
    mha = nn.MultiheadAttention(8, 2, generator=g, dtype=f64)
    q = ember.randn(2, L, 8, dtype=f64, generator=g)
    kv = ember.randn(2, S, 8, dtype=f64, generator=g)
    return mha, q, kv


def test_hook_sees_scores_and_weights_of_the_graph():
    mha, q, kv = mha_and_inputs()
    seen = []
    handle = mha.register_attention_hook(lambda module, internals: seen.append(internals))
    pad = ember.tensor([[False, False, False, False, True], [False] * 5])
    out, w = mha(q, kv, kv, key_padding_mask=pad, average_attn_weights=False)
    assert len(seen) == 1
    inner = seen[0]
    assert inner.scores.shape == (2, 2, 3, 5) and inner.weights.shape == (2, 2, 3, 5)
    assert ember.allclose(inner.weights, w, rtol=0, atol=1e-15)
    assert ember.allclose(ember.softmax(inner.scores, -1), inner.weights, rtol=0, atol=1e-15)
    assert inner.blocked is not None and inner.blocked.shape[-1] == 5
    assert inner.weights[0, :, :, 4].abs().max().item() == 0  # the padded key
    # the loss's gradient reaching them: the softmax's backward, dZ = P * (dP - sum(P * dP))
    loss = (out * out).sum()
    dz, dp = ember.autograd.grad(loss, (inner.scores, inner.weights))
    p = inner.weights.detach()
    expected = p * (dp - (p * dp).sum(-1, keepdim=True))
    assert ember.allclose(dz, expected, rtol=1e-12, atol=1e-14)
    handle.remove()
    mha(q, kv, kv)
    assert len(seen) == 1


def test_hook_through_a_layer_and_its_exceptions():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, generator=ember.Generator(1), dtype=f64)
    x = ember.randn(1, 4, 8, dtype=f64, generator=ember.Generator(2))
    seen = []
    h = layer.self_attn.register_attention_hook(lambda m, i: seen.append((m.num_heads, i.weights.shape)))
    y = layer(x)
    assert seen == [(2, (1, 2, 4, 4))]
    h.remove()

    def broken(m, i):
        raise KeyError("from the hook")

    h = layer.self_attn.register_attention_hook(broken)
    with pytest.raises(KeyError, match="from the hook"):
        layer(x)
    h.remove()
    assert ember.equal(layer(x), y)  # usable afterwards, and the same
    dec = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, generator=ember.Generator(1), dtype=f64)
    assert dec.multihead_attn.num_heads == 2 and dec.self_attn.embed_dim == 8


def test_head_statistics_match_their_definitions():
    mha, q, kv = mha_and_inputs(3, L=4, S=6)
    got = {}
    mha.register_attention_hook(lambda m, i: got.update(internals=i))
    out, _ = mha(q, kv, kv, need_weights=False)
    inner = got["internals"]
    dz, dp = ember.autograd.grad((out * out).sum(), (inner.scores, inner.weights))
    stats = ember.watch.head_statistics(inner.scores, inner.weights, dz, dp)
    assert set(stats) == set(ember.watch.quantities)
    P = inner.weights.detach().numpy()  # [B, H, L, S]
    Z = inner.scores.detach().numpy()
    ent = -(P * np.log(P)).sum(-1)  # [B, H, L]
    for h in range(2):
        assert stats["entropy_mean"][h] == pytest.approx(ent[:, h].mean(), rel=1e-12)
        assert stats["entropy_norm_mean"][h] == pytest.approx((ent[:, h] / math.log(6)).mean(), rel=1e-12)
        assert stats["max_weight_mean"][h] == pytest.approx(P[:, h].max(-1).mean(), rel=1e-12)
        assert stats["score_std"][h] == pytest.approx(Z[:, h].std(-1).mean(), rel=1e-9)
        gz, gp = np.linalg.norm(dz.numpy()[:, h]), np.linalg.norm(dp.numpy()[:, h])
        assert stats["grad_ratio"][h] == pytest.approx(gz / gp, rel=1e-12)
    assert all(0 <= s <= 1 for s in stats["saturated_share"])
    assert "entropy" in ember.watch.meaning("entropy_mean")
    no_grads = ember.watch.head_statistics(inner.scores, inner.weights)
    assert no_grads["entropy_mean"] == stats["entropy_mean"]
