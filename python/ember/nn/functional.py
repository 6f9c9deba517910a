"""ember.nn.functional, as torch.nn.functional, over ember's fused ops (nn/functional.h,
nn/attention.h, core/ops.h). Where ember differs, the docstring says so."""

from .. import _C
from .._C import softmax, log_softmax, masked_fill, relu  # noqa: F401

_nn = _C._nn


def linear(input, weight, bias=None):
    """input [..., in] @ weight[out, in]^T + bias[out]."""
    return _nn.linear(input, weight, bias)


def gelu(input, approximate="none"):
    """GELU, exact (erf) or with approximate="tanh"."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f'gelu: approximate must be "none" or "tanh", got "{approximate}"')
    return _nn.gelu(input, approximate == "tanh")


def dropout(input, p=0.5, training=True, generator=None):
    """Zeroes elements with probability p and scales the rest by 1/(1-p) when training."""
    return _nn.dropout(input, p, training, generator)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer norm over the last dim: ember normalises one dim, so normalized_shape is
    input.shape[-1] (an int or a one-element tuple)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if shape != tuple(input.shape[-1:]):
        raise RuntimeError(f"layer_norm: normalized_shape must be the last dim {tuple(input.shape[-1:])}, "
                           f"got {shape} (ember normalises over the last dim only)")
    return _nn.layer_norm(input, weight, bias, eps)


def cross_entropy(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Mean cross-entropy of logits [..., C] (classes last: PyTorch's [N, C] is the same,
    its [N, C, d...] is not) against int64 targets [...]. Only reduction="mean". When
    every target is ignored the loss is 0 (PyTorch gives NaN)."""
    if reduction != "mean":
        raise ValueError(f'cross_entropy: only reduction="mean" exists in ember, got "{reduction}"')
    return _nn.cross_entropy(input, target, ignore_index, label_smoothing)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, generator=None):
    """Attention of query [..., L, D] over key [..., S, D] and value [..., S, Dv].

    Unlike PyTorch's, it returns (output [..., L, Dv], weights [..., L, S]): the softmax
    weights before dropout, detached. attn_mask is a bool tensor with PyTorch's meaning
    here (True = may attend; float masks do not exist). is_causal blocks key j > i, as
    PyTorch's does when L == S (for L < S ember aligns the queries with the last keys).
    A query with every key blocked gets zero weights and output (PyTorch gives NaN)."""
    if attn_mask is not None and (not isinstance(attn_mask, _C.Tensor) or attn_mask.dtype != _C.bool):
        got = f"{attn_mask.dtype} of shape {list(attn_mask.shape)}" if isinstance(attn_mask, _C.Tensor) \
            else type(attn_mask).__name__
        raise TypeError("scaled_dot_product_attention: expected a bool attn_mask (True = may attend; float "
                        f"masks do not exist in ember), got {got}")
    blocked = None if attn_mask is None else ~attn_mask
    if is_causal:
        causal = _nn.causal_mask(query.shape[-2], key.shape[-2])
        blocked = causal if blocked is None else (blocked | causal)
    if scale is not None and scale == 0:
        raise ValueError("scaled_dot_product_attention: scale must not be 0")
    return _nn.scaled_dot_product_attention(query, key, value, blocked, dropout_p, scale or 0.0,
                                            generator)
