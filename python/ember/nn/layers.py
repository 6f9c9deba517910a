"""The layers of ember's C++ library (nn/layers.h, nn/multihead_attention.h,
nn/transformer.h) as Modules. Each holds its C++ module; its parameters, buffers and
sub-layers live there, under the C++ names (MultiheadAttention's q_proj, k_proj, v_proj
and out_proj rather than PyTorch's in_proj_weight), and its attributes (weight,
out_proj, embed_dim) are read from it."""

from .. import _C
from .module import Module

_nn = _C._nn


class _CppModule(Module):
    """A Module over a C++ module `_impl`, built by the subclass with the arguments given."""

    _cpp = None  # the C++ class

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.__dict__["_impl"] = self._cpp(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self._impl.forward(*args, **kwargs)

    def __getattr__(self, name):
        impl = self.__dict__.get("_impl")
        if impl is not None and hasattr(impl, name):
            return getattr(impl, name)
        return super().__getattr__(name)

    # the C++ module lists its tensors itself, with dotted names below this module
    def _own_parameters(self):
        return self._impl.named_parameters()

    def _own_buffers(self, persistent_only=False):
        if persistent_only:
            params = {n for n, _ in self._impl.named_parameters()}
            return [(n, t) for n, t in self._impl.state_dict().items() if n not in params]
        return self._impl.named_buffers()

    def _own_state(self):
        # registration order, as named_parameters (the C++ state_dict is sorted by name)
        return self._own_parameters() + self._own_buffers(persistent_only=True)

    def _set_training(self, mode):
        self._impl.train(mode)

    def _to(self, dtype):
        self._impl.to(dtype)


class Linear(_CppModule):
    """Linear(in_features, out_features, bias=True, generator=None, dtype=ember.float32)"""

    _cpp = _nn.Linear

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}"


class Embedding(_CppModule):
    """Embedding(num_embeddings, embedding_dim, padding_idx=None, generator=None, dtype=...);
    a negative padding_idx does not count from the end."""

    _cpp = _nn.Embedding


class Dropout(_CppModule):
    """Dropout(p=0.5, generator=None): active in training mode only. forward(rows,
    packing=...) drops packed rows [N, C] with the masks of their places in the padded
    batch."""

    _cpp = _nn.Dropout

    def forward(self, input, packing=None):
        if packing is not None:
            return _nn._dropout_packed(self._impl, input, packing)
        return self._impl.forward(input)


class LayerNorm(_CppModule):
    """LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, dtype=...): over the
    last dim only (normalized_shape an int, or a one-element tuple)."""

    _cpp = _nn.LayerNorm

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype=_C.float32):
        if not isinstance(normalized_shape, int):
            if len(normalized_shape) != 1:
                raise ValueError("LayerNorm: ember normalises over the last dim only; "
                                 f"normalized_shape must have one size, got {tuple(normalized_shape)}")
            normalized_shape = normalized_shape[0]
        super().__init__(normalized_shape, eps, elementwise_affine, dtype)


def _batch_first(name, batch_first):
    if not batch_first:
        raise ValueError(f"{name}: ember's layers are batch-first; batch_first=False does not exist")


class MultiheadAttention(_CppModule):
    """MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None,
    batch_first=True, generator=None, dropout_generator=None, dtype=ember.float32).

    forward(query [B, L, E], key [B, S, kdim], value [B, S, vdim], key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False) returns
    (output [B, L, E], weights [B, L, S] averaged or [B, H, L, S] per head, or None). Masks
    are bool, True = blocked; attn_mask is [L, S] or [B, L, S] (not PyTorch's [B*H, L, S]).
    A query whose keys are all blocked gets out_proj.bias (PyTorch gives NaN)."""

    _cpp = _nn.MultiheadAttention

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None,
                 batch_first=True, generator=None, dropout_generator=None, dtype=_C.float32):
        _batch_first("MultiheadAttention", batch_first)
        super().__init__(embed_dim, num_heads, dropout, bias, kdim, vdim, generator,
                         dropout_generator, dtype)


class TransformerEncoderLayer(_CppModule):
    """TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1,
    activation="relu", layer_norm_eps=1e-5, batch_first=True, norm_first=False,
    generator=None, dropout_generator=None, dtype=ember.float32).

    forward(src [B, S, d_model], src_mask=None, src_key_padding_mask=None): bool masks,
    True = blocked. forward(rows [N, d_model], packing=...): the same on the packed rows of
    a padded batch (Packing), as nn::Transformer's encoder runs."""

    _cpp = _nn.TransformerEncoderLayer

    def forward(self, src, src_mask=None, src_key_padding_mask=None, packing=None):
        if packing is not None:
            if src_mask is not None or src_key_padding_mask is not None:
                raise ValueError("TransformerEncoderLayer.forward: packed rows carry their padding; "
                                 "expected no src_mask and no src_key_padding_mask")
            return _nn._encoder_layer_packed(self._impl, src, packing)
        return self._impl.forward(src, src_mask, src_key_padding_mask)

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=True, norm_first=False, generator=None,
                 dropout_generator=None, dtype=_C.float32):
        _batch_first("TransformerEncoderLayer", batch_first)
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         norm_first, generator, dropout_generator, dtype)


class TransformerDecoderLayer(_CppModule):
    """TransformerDecoderLayer(same arguments as TransformerEncoderLayer).

    forward(tgt [B, T, d_model], memory [B, S, d_model], tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False): the target's self-attention is
    causal with tgt_is_causal; arbitrary tgt_mask and memory_mask do not exist.

    With memory_packing, memory is the packed rows [N, d_model] of a padded batch
    (Packing), which carry its padding, and the target's self-attention is causal; with
    tgt_packing too, tgt is packed rows of the target and so is the output (as
    nn::Transformer runs its decoder on a target without padding)."""

    _cpp = _nn.TransformerDecoderLayer

    def forward(self, tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=False, memory_packing=None, tgt_packing=None):
        if memory_packing is None:
            if tgt_packing is not None:
                raise ValueError("TransformerDecoderLayer.forward: tgt_packing needs memory_packing")
            return self._impl.forward(tgt, memory, tgt_key_padding_mask, memory_key_padding_mask,
                                      tgt_is_causal)
        if memory_key_padding_mask is not None or not tgt_is_causal:
            raise ValueError("TransformerDecoderLayer.forward: with memory_packing the memory carries its "
                             "padding and the target is causal: expected no memory_key_padding_mask and "
                             "tgt_is_causal=True")
        return _nn._decoder_layer_packed(self._impl, tgt, memory, memory_packing, tgt_packing,
                                         tgt_key_padding_mask)

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=True, norm_first=False, generator=None,
                 dropout_generator=None, dtype=_C.float32):
        _batch_first("TransformerDecoderLayer", batch_first)
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         norm_first, generator, dropout_generator, dtype)


class Transformer(_CppModule):
    """ember's encoder-decoder model on token ids (nn/transformer.h): Transformer(src_vocab,
    tgt_vocab, d_model=128, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
    dim_feedforward=512, dropout=0.1, activation="relu", norm_first=False, max_len=512,
    pad_id=0, generator=None, dtype=...); forward(src [B, S], tgt [B, T]) -> logits
    [B, T, tgt_vocab]. Unlike torch.nn.Transformer it includes the embeddings and the
    output projection."""

    _cpp = _nn.Transformer


# The non-padding positions of int64 ids [B, S]: Packing.of(ids, pad_id); pack(padded
# [B, S, ...]) -> rows [N, ...], unpack(rows) -> [B, S, ...] with zeros at padding; batch,
# length, count, rows (b * S + s of each kept position), positions (s), padding ([B, S]
# bool, True = padding). See nn/packing.h.
Packing = _nn.Packing

# ember's C++ names
MultiHeadAttention = MultiheadAttention
EncoderLayer = TransformerEncoderLayer
DecoderLayer = TransformerDecoderLayer
