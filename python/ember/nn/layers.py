"""The layers of ember's C++ library (nn/layers.h, nn/multihead_attention.h,
nn/transformer.h) as Modules. Each holds its C++ module; its parameters, buffers and
sub-layers live there, under the C++ names (MultiheadAttention's q_proj, k_proj, v_proj
and out_proj rather than PyTorch's in_proj_weight), and its attributes (weight,
out_proj, embed_dim) are read from it."""

import weakref

from .. import _C
from .module import Module

_nn = _C._nn


class _CppModule(Module):
    """A Module over a C++ module `_impl`, built by the subclass with the arguments given.
    The C++ module's sub-layers (an encoder layer's self_attn, norm1, ...) are reached as
    attributes and through named_children() and named_modules(), each as a Module over the
    C++ one (the same object every time); the C++ parent calls them from C++, so Python
    forward hooks cannot be registered on them (attention hooks can)."""

    _cpp = None  # the C++ class

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.__dict__["_impl"] = self._cpp(*args, **kwargs)
        self.__dict__["_inside"] = None  # "<name> of <parent>" for a sub-layer of a C++ module
        self.__dict__["_sub_layers"] = {}  # name -> the Module over that C++ sub-layer

    @classmethod
    def _over(cls, impl, inside):
        """The Module over an existing C++ module (a sub-layer of another)."""
        m = cls.__new__(cls)
        Module.__init__(m)
        m.__dict__.update(_impl=impl, _inside=inside, _sub_layers={})
        return m

    @property
    def training(self):
        return self._impl.training

    def forward(self, *args, **kwargs):
        return self._impl.forward(*args, **kwargs)

    def _sub_layer(self, name, impl):
        cached = self._sub_layers.get(name)
        if cached is None or cached._impl is not impl:
            cls = _WRAPPERS.get(type(impl), _CppSubModule)
            cached = cls._over(impl, f"{name} of {type(self).__name__}")
            self._sub_layers[name] = cached
        return cached

    def __getattr__(self, name):
        impl = self.__dict__.get("_impl")
        if impl is not None and hasattr(impl, name):
            value = getattr(impl, name)
            return self._sub_layer(name, value) if isinstance(value, _nn.Module) else value
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        impl = self.__dict__.get("_impl")
        if impl is not None and hasattr(impl, name) and name not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.{name} is the C++ layer's and cannot be replaced; change "
                                 f"its values in place (with ember.no_grad(): layer.{name}.copy_(value))")
        super().__setattr__(name, value)

    def named_children(self):
        yield from super().named_children()
        for name, impl in self._impl.named_children():
            yield name, self._sub_layer(name, impl)

    def register_forward_hook(self, hook):
        self._hookable("register_forward_hook")
        return super().register_forward_hook(hook)

    def register_forward_pre_hook(self, hook):
        self._hookable("register_forward_pre_hook")
        return super().register_forward_pre_hook(hook)

    def _hookable(self, what):
        if self._inside is not None:
            raise RuntimeError(f"{what}: this {type(self).__name__} is the {self._inside}, a C++ layer that calls "
                               "it from C++, so a Python forward hook would never run; hook the enclosing layer "
                               "(or, on attention, use register_attention_hook)")

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


class _CppSubModule(_CppModule):
    """A C++ sub-layer of a type Python has no class for (the feed-forward block, a stack)."""

    def extra_repr(self):
        return "C++"


class Linear(_CppModule):
    r"""Applies an affine transformation to the last dim: :math:`y = x W^T + b`.

    Args:
        in_features: size of each input sample.
        out_features: size of each output sample.
        bias: if ``False``, the layer learns no additive bias (``bias`` is ``None``).
            Default: ``True``
        generator: the :class:`ember.Generator` the initial values are drawn from (the
            default generator when ``None``).
        dtype: ``ember.float32`` (default) or ``ember.float64``.

    Shape:
        - Input: :math:`(*, H_{in})`, :math:`*` any number of dims, :math:`H_{in} =`
          ``in_features``.
        - Output: :math:`(*, H_{out})`, :math:`H_{out} =` ``out_features``.

    Attributes:
        weight: the learnable weights of shape ``(out_features, in_features)``, drawn
            Kaiming-uniform as PyTorch's.
        bias: the learnable bias of shape ``(out_features)``, from
            :math:`\mathcal{U}(-1/\sqrt{in}, 1/\sqrt{in})`.

    Example::

        >>> m = nn.Linear(20, 30)
        >>> output = m(ember.randn(128, 20))
        >>> output.shape
        (128, 30)
    """

    _cpp = _nn.Linear

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}"


class Embedding(_CppModule):
    r"""A lookup table of ``num_embeddings`` vectors of size ``embedding_dim``, indexed by
    int64 ids of any shape.

    Args:
        num_embeddings: size of the dictionary of embeddings.
        embedding_dim: the size of each embedding vector.
        padding_idx: if given, that row starts at zero and never receives a gradient.
            Unlike PyTorch's, a negative ``padding_idx`` does not count from the end.
        generator: the :class:`ember.Generator` the initial values are drawn from (the
            default generator when ``None``).
        dtype: ``ember.float32`` (default) or ``ember.float64``.

    Shape:
        - Input: :math:`(*)`, int64 ids of any shape.
        - Output: :math:`(*, H)`, :math:`H =` ``embedding_dim``.

    Attributes:
        weight: the learnable table of shape ``(num_embeddings, embedding_dim)``, drawn
            from :math:`\mathcal{N}(0, 1)`.

    Example::

        >>> embedding = nn.Embedding(10, 3)
        >>> ids = ember.tensor([[1, 2, 4, 5], [4, 3, 2, 9]])
        >>> embedding(ids).shape
        (2, 4, 3)
    """

    _cpp = _nn.Embedding


class Dropout(_CppModule):
    r"""During training, zeroes each element with probability ``p`` and scales the others
    by :math:`\frac{1}{1-p}`; in eval mode, returns its input.

    Args:
        p: probability of an element to be zeroed. Default: 0.5
        generator: the :class:`ember.Generator` the masks are drawn from (the default
            generator when ``None``).

    forward(rows, packing=...) drops packed rows :math:`(N, C)` with the masks of their
    places in the padded batch (:class:`ember.nn.Packing`).

    Shape:
        - Input: :math:`(*)`, any shape.
        - Output: :math:`(*)`, the shape of the input.

    Example::

        >>> m = nn.Dropout(p=0.2)
        >>> x = ember.ones(20, 16)
        >>> m(x).shape
        (20, 16)
        >>> m.eval()(x).equal(x)
        True
    """

    _cpp = _nn.Dropout

    def forward(self, input, packing=None):
        if packing is not None:
            return _nn._dropout_packed(self._impl, input, packing)
        return self._impl.forward(input)


class LayerNorm(_CppModule):
    r"""Applies Layer Normalization over the last dim:
    :math:`y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} * \gamma + \beta`.

    Unlike PyTorch's, only the last dim is normalised: ``normalized_shape`` is its size
    (an int, or a one-element tuple).

    Args:
        normalized_shape: the size of the last dim of the input.
        eps: a value added to the denominator for numerical stability. Default: 1e-5
        elementwise_affine: if ``True``, learnable per-element ``weight`` (initialised to
            ones) and ``bias`` (zeros). Default: ``True``
        dtype: ``ember.float32`` (default) or ``ember.float64``.

    Shape:
        - Input: :math:`(*, N)`, :math:`N =` ``normalized_shape``.
        - Output: :math:`(*, N)`, the shape of the input.

    Example::

        >>> layer_norm = nn.LayerNorm(10)
        >>> y = layer_norm(ember.randn(20, 5, 10))
        >>> y.shape
        (20, 5, 10)
        >>> y.mean(-1).abs().amax().item() < 1e-5
        True
    """

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
    r"""Allows the model to jointly attend to information from different representation
    subspaces, as described in "Attention Is All You Need".

    .. math::
        \text{MultiHead}(Q, K, V) = \text{Concat}(head_1,\dots,head_h)W^O
        \text{ where } head_i = \text{Attention}(QW^Q_i, KW^K_i, VW^V_i).

    ember's layers are batch-first. The projections are separate linear layers ``q_proj``,
    ``k_proj``, ``v_proj`` and ``out_proj`` (not PyTorch's packed ``in_proj_weight``).

    Args:
        embed_dim: total dimension of the model.
        num_heads: number of parallel attention heads; ``embed_dim`` is split across them
            (each head has dimension ``embed_dim // num_heads``).
        dropout: dropout probability on the attention weights. Default: ``0.0``
        bias: if ``True``, the projections have biases. Default: ``True``
        kdim: total number of features of the keys. Default: ``None`` (``embed_dim``)
        vdim: total number of features of the values. Default: ``None`` (``embed_dim``)
        batch_first: must be ``True`` (inputs are (batch, seq, feature)); ``False`` is a
            ValueError.
        generator: the :class:`ember.Generator` the initial values are drawn from.
        dropout_generator: the :class:`ember.Generator` dropout masks are drawn from.
        dtype: ``ember.float32`` (default) or ``ember.float64``.
        qk_norm: if ``True``, each head's queries and keys are layer-normalised over its
            ``head_dim`` features before the scores (``q_norm`` and ``k_norm``, one gain and
            bias each, shared by the heads; ember's own, not in PyTorch). Default: ``False``

    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) returns ``(attn_output, attn_weights)``:

        - key_padding_mask: bool, ``True`` where a key is padding and may not be attended.
        - need_weights: if ``False``, ``attn_weights`` is ``None``.
        - attn_mask: bool, ``True`` = blocked; :math:`(L, S)` or :math:`(B, L, S)` (not
          PyTorch's :math:`(B \cdot H, L, S)`; float masks do not exist).
        - average_attn_weights: if ``True``, the weights are averaged over the heads.
        - is_causal: blocks key :math:`j > i` for query :math:`i`.

        A query whose keys are all blocked gets ``out_proj.bias`` (PyTorch gives NaN).

    Shape:
        - query: :math:`(B, L, E)`, :math:`E =` ``embed_dim``.
        - key: :math:`(B, S, E_k)`, :math:`E_k =` ``kdim``.
        - value: :math:`(B, S, E_v)`, :math:`E_v =` ``vdim``.
        - key_padding_mask: :math:`(B, S)`.
        - attn_output: :math:`(B, L, E)`.
        - attn_weights: :math:`(B, L, S)` averaged, or :math:`(B, H, L, S)` per head.

    Example::

        >>> multihead_attn = nn.MultiheadAttention(16, 4)
        >>> query = ember.randn(2, 5, 16)
        >>> key = value = ember.randn(2, 7, 16)
        >>> attn_output, attn_weights = multihead_attn(query, key, value)
        >>> attn_output.shape, attn_weights.shape
        ((2, 5, 16), (2, 5, 7))
    """

    _cpp = _nn.MultiheadAttention

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None,
                 batch_first=True, generator=None, dropout_generator=None, dtype=_C.float32,
                 qk_norm=False):
        _batch_first("MultiheadAttention", batch_first)
        super().__init__(embed_dim, num_heads, dropout, bias, kdim, vdim, generator,
                         dropout_generator, dtype, qk_norm)

    def register_attention_hook(self, hook):
        """hook(module, internals) inside every forward: internals.scores and .weights
        [B, H, L, S] are tensors of the graph (ember.autograd.grad reads the gradient
        reaching them), internals.blocked the blocked pairs or None. With a hook the module
        computes attention from primitive ops (the fused kernel's results, to rounding).
        Returns a handle whose remove() takes the hook off."""
        if not callable(hook):
            raise TypeError(f"register_attention_hook: the hook must be callable, got {type(hook).__name__}")
        me = weakref.ref(self)  # the C++ module keeps the hook: no cycle through it

        def call(impl, internals):
            hook(me() or impl, internals)

        return self._impl.register_attention_hook(call)


class TransformerEncoderLayer(_CppModule):
    r"""Self-attention and a feed-forward network, each with a residual connection, dropout
    and layer norm: the encoder layer of "Attention Is All You Need", as PyTorch's.

    Each sub-layer is ``LayerNorm(x + Dropout(sublayer(x)))``, or with ``norm_first``
    ``x + Dropout(sublayer(LayerNorm(x)))``.

    Args:
        d_model: the number of expected features in the input.
        nhead: the number of heads in the attention.
        dim_feedforward: the dimension of the feed-forward network. Default: 2048
        dropout: the dropout value. Default: 0.1
        activation: the feed-forward network's activation, ``"relu"`` or ``"gelu"``.
            Default: ``"relu"``
        layer_norm_eps: the eps of the layer norms. Default: 1e-5
        batch_first: must be ``True`` (inputs are (batch, seq, feature)); ``False`` is a
            ValueError.
        norm_first: if ``True``, layer norm comes before attention and feed-forward
            (pre-norm). Default: ``False``
        generator: the :class:`ember.Generator` the initial values are drawn from.
        dropout_generator: the :class:`ember.Generator` dropout masks are drawn from.
        dtype: ``ember.float32`` (default) or ``ember.float64``.
        qk_norm: if ``True``, the attentions layer-normalise their queries and keys per head
            (see :class:`MultiheadAttention`; ember's own). Default: ``False``

    forward(src, src_mask=None, src_key_padding_mask=None): the masks are bool, ``True`` =
    blocked; ``src_mask`` is :math:`(S, S)` or :math:`(B, S, S)`, ``src_key_padding_mask``
    :math:`(B, S)`. forward(rows, packing=...) does the same on the packed rows
    :math:`(N, E)` of a padded batch (:class:`ember.nn.Packing`), as ember's Transformer
    runs its encoder.

    Shape:
        - src: :math:`(B, S, E)`, :math:`E =` ``d_model``.
        - Output: :math:`(B, S, E)`.

    Example::

        >>> encoder_layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64)
        >>> src = ember.randn(2, 10, 32)
        >>> encoder_layer(src).shape
        (2, 10, 32)
    """

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
                 dropout_generator=None, dtype=_C.float32, qk_norm=False):
        _batch_first("TransformerEncoderLayer", batch_first)
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         norm_first, generator, dropout_generator, dtype, qk_norm)


class TransformerDecoderLayer(_CppModule):
    r"""Self-attention, attention over the encoder's output (memory) and a feed-forward
    network, each with a residual connection, dropout and layer norm: the decoder layer of
    "Attention Is All You Need", as PyTorch's.

    Args:
        d_model: the number of expected features in the input.
        nhead: the number of heads in the attentions.
        dim_feedforward: the dimension of the feed-forward network. Default: 2048
        dropout: the dropout value. Default: 0.1
        activation: the feed-forward network's activation, ``"relu"`` or ``"gelu"``.
            Default: ``"relu"``
        layer_norm_eps: the eps of the layer norms. Default: 1e-5
        batch_first: must be ``True`` (inputs are (batch, seq, feature)); ``False`` is a
            ValueError.
        norm_first: if ``True``, layer norm comes before each sub-layer (pre-norm).
            Default: ``False``
        generator: the :class:`ember.Generator` the initial values are drawn from.
        dropout_generator: the :class:`ember.Generator` dropout masks are drawn from.
        dtype: ``ember.float32`` (default) or ``ember.float64``.
        qk_norm: if ``True``, the attentions layer-normalise their queries and keys per head
            (see :class:`MultiheadAttention`; ember's own). Default: ``False``

    forward(tgt, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=False): the padding masks are bool, ``True`` = padding; with
    ``tgt_is_causal`` the target's self-attention is causal. PyTorch's arbitrary
    ``tgt_mask`` and ``memory_mask`` do not exist. With ``memory_packing``, memory is the
    packed rows :math:`(N, E)` of a padded batch (:class:`ember.nn.Packing`), which carry its
    padding, and the target's self-attention is causal; with ``tgt_packing`` too, tgt and
    the output are packed rows of the target.

    Shape:
        - tgt: :math:`(B, T, E)`, :math:`E =` ``d_model``.
        - memory: :math:`(B, S, E)`.
        - Output: :math:`(B, T, E)`.

    Example::

        >>> decoder_layer = nn.TransformerDecoderLayer(d_model=32, nhead=4, dim_feedforward=64)
        >>> memory = ember.randn(2, 10, 32)
        >>> tgt = ember.randn(2, 7, 32)
        >>> decoder_layer(tgt, memory, tgt_is_causal=True).shape
        (2, 7, 32)
    """

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
                 dropout_generator=None, dtype=_C.float32, qk_norm=False):
        _batch_first("TransformerDecoderLayer", batch_first)
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         norm_first, generator, dropout_generator, dtype, qk_norm)


class Transformer(_CppModule):
    r"""ember's encoder-decoder model on token ids (nn/transformer.h): embeddings scaled by
    :math:`\sqrt{d_{model}}` plus positional encoding, an encoder and a decoder stack, and
    the projection to target-vocabulary logits. Unlike ``torch.nn.Transformer`` it includes
    the embeddings and the output projection; the decoder's self-attention is causal.

    Args:
        src_vocab: the size of the source vocabulary.
        tgt_vocab: the size of the target vocabulary.
        d_model: the number of features of the embeddings and layers. Default: 128
        nhead: the number of heads in the attentions. Default: 4
        num_encoder_layers: the number of encoder layers. Default: 2
        num_decoder_layers: the number of decoder layers. Default: 2
        dim_feedforward: the dimension of the feed-forward networks. Default: 512
        dropout: the dropout value. Default: 0.1
        activation: ``"relu"`` or ``"gelu"``. Default: ``"relu"``
        norm_first: if ``True``, pre-norm layers. Default: ``False``
        max_len: the longest sequence the positional encoding covers. Default: 512
        pad_id: the token id of padding, masked out of attention. Default: 0
        generator: the :class:`ember.Generator` the initial values are drawn from.
        dtype: ``ember.float32`` (default) or ``ember.float64``.
        qk_norm: if ``True``, every attention layer-normalises its queries and keys per head
            (see :class:`MultiheadAttention`). Default: ``False``

    forward(src, tgt) returns the logits of each target position.

    Shape:
        - src: :math:`(B, S)`, int64 token ids.
        - tgt: :math:`(B, T)`, int64 token ids (the decoder's input).
        - Output: :math:`(B, T, V)`, :math:`V =` ``tgt_vocab``.

    Example::

        >>> model = nn.Transformer(src_vocab=100, tgt_vocab=120, d_model=32, nhead=4)
        >>> src = ember.arange(18).view(2, 9) + 1
        >>> tgt = ember.arange(14).view(2, 7) + 1
        >>> model(src, tgt).shape
        (2, 7, 120)
    """

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

# the Module class over each C++ class, for sub-layers reached through a C++ parent
_WRAPPERS = {c._cpp: c for c in (Linear, Embedding, Dropout, LayerNorm, MultiheadAttention,
                                 TransformerEncoderLayer, TransformerDecoderLayer, Transformer)}
