# Type stubs of ember.nn.layers (layers.py): ember's C++ layers as Modules. Their
# attributes are read from the C++ layer; sub-layers such as MultiheadAttention.q_proj
# are Modules over the C++ sub-layer, with the same attributes and forward.

from typing import Any, Callable, Optional, Tuple, Union, Sequence

from .._C import Generator, RemovableHandle, Tensor, dtype
from .module import Module

class Packing:
    """The non-padding positions of a batch of token ids [B, S] (nn/packing.h)."""

    @property
    def batch(self) -> int:
        """B."""
    @property
    def length(self) -> int:
        """S."""
    @property
    def count(self) -> int:
        """N, the positions kept."""
    @property
    def rows(self) -> Tensor:
        """b * S + s of each kept position, int64 [N]."""
    @property
    def positions(self) -> Tensor:
        """s of each kept position, int64 [N]."""
    @property
    def padding(self) -> Optional[Tensor]:
        """bool [B, S], True at padding (None: none)."""
    @staticmethod
    def of(ids: Tensor, pad_id: int) -> Packing:
        """The packing of ids [B, S]: every position whose id is not pad_id."""
    def pack(self, padded: Tensor) -> Tensor:
        """[B, S, ...] -> the kept rows [N, ...]."""
    def unpack(self, packed: Tensor) -> Tensor:
        """[N, ...] -> [B, S, ...], zeros at padding."""

class Linear(Module):
    """y = x W^T + b, as torch.nn.Linear."""

    in_features: int
    out_features: int
    weight: Tensor
    bias: Optional[Tensor]
    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 generator: Optional[Generator] = None, dtype: dtype = ...) -> None: ...
    def forward(self, input: Tensor) -> Tensor:
        """input [..., in_features] -> [..., out_features]."""

class Embedding(Module):
    """A lookup table of num_embeddings vectors, as torch.nn.Embedding."""

    num_embeddings: int
    embedding_dim: int
    weight: Tensor
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 generator: Optional[Generator] = None, dtype: dtype = ...) -> None: ...
    def forward(self, input: Tensor) -> Tensor:
        """int64 indices [...] -> vectors [..., embedding_dim]."""

class Dropout(Module):
    """Zeroes elements with probability p in training mode, as torch.nn.Dropout."""

    p: float
    def __init__(self, p: float = 0.5, generator: Optional[Generator] = None) -> None: ...
    def forward(self, input: Tensor, packing: Optional[Packing] = None) -> Tensor:
        """input with dropout applied (itself in eval mode); with packing, input is the packed
        rows of a padded batch, dropped with the masks of their places in it."""

class LayerNorm(Module):
    """Layer normalisation over the last dim, as torch.nn.LayerNorm."""

    normalized_shape: int
    eps: float
    weight: Optional[Tensor]
    bias: Optional[Tensor]
    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: float = 1e-5,
                 elementwise_affine: bool = True, dtype: dtype = ...) -> None: ...
    def forward(self, input: Tensor) -> Tensor:
        """input [..., normalized_shape], normalised over the last dim."""

class MultiheadAttention(Module):
    """Multi-head attention (batch-first), as torch.nn.MultiheadAttention; returns
    (output, weights)."""

    embed_dim: int
    num_heads: int
    kdim: int
    vdim: int
    head_dim: int
    q_proj: Linear
    k_proj: Linear
    v_proj: Linear
    out_proj: Linear
    q_norm: Optional[LayerNorm]
    k_norm: Optional[LayerNorm]
    def register_attention_hook(self, hook: Callable[[Any, Any], None]) -> RemovableHandle:
        """hook(module, internals) inside every forward: internals.scores and .weights
        [B, H, L, S] are tensors of the graph (the gradient reaching them can be read),
        internals.blocked the blocked pairs or None."""
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 kdim: Optional[int] = None, vdim: Optional[int] = None, batch_first: bool = True,
                 generator: Optional[Generator] = None, dropout_generator: Optional[Generator] = None,
                 dtype: dtype = ..., qk_norm: bool = False) -> None: ...
    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor] = None,
                need_weights: bool = True, attn_mask: Optional[Tensor] = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """(output [B, L, E], weights [B, L, S] or [B, H, L, S] or None); masks are bool,
        True = blocked."""

class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual and layer norm, as
    torch.nn.TransformerEncoderLayer (batch-first)."""

    self_attn: MultiheadAttention
    norm1: LayerNorm
    norm2: LayerNorm

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = True,
                 norm_first: bool = False, generator: Optional[Generator] = None,
                 dropout_generator: Optional[Generator] = None, dtype: dtype = ...,
                 qk_norm: bool = False) -> None: ...
    def forward(self, src: Tensor, src_mask: Optional[Tensor] = None,
                src_key_padding_mask: Optional[Tensor] = None, packing: Optional[Packing] = None) -> Tensor:
        """src [B, S, d_model] -> [B, S, d_model]; masks are bool, True = blocked. With packing,
        src is the packed rows [N, d_model] of a padded batch, and so is the output."""

class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over memory and a feed-forward block, as
    torch.nn.TransformerDecoderLayer (batch-first)."""

    self_attn: MultiheadAttention
    multihead_attn: MultiheadAttention
    cross_attn: MultiheadAttention
    norm1: LayerNorm
    norm2: LayerNorm
    norm3: LayerNorm

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = True,
                 norm_first: bool = False, generator: Optional[Generator] = None,
                 dropout_generator: Optional[Generator] = None, dtype: dtype = ...,
                 qk_norm: bool = False) -> None: ...
    def forward(self, tgt: Tensor, memory: Tensor, tgt_key_padding_mask: Optional[Tensor] = None,
                memory_key_padding_mask: Optional[Tensor] = None, tgt_is_causal: bool = False,
                memory_packing: Optional[Packing] = None, tgt_packing: Optional[Packing] = None) -> Tensor:
        """tgt [B, T, d_model] attending to memory [B, S, d_model] -> [B, T, d_model]; with
        memory_packing, memory is packed rows (and the self-attention causal); with
        tgt_packing too, tgt and the output are packed rows."""

class Transformer(Module):
    """ember's encoder-decoder model on token ids, embeddings and output projection included."""

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 128, nhead: int = 4,
                 num_encoder_layers: int = 2, num_decoder_layers: int = 2, dim_feedforward: int = 512,
                 dropout: float = 0.1, activation: str = "relu", norm_first: bool = False, max_len: int = 512,
                 pad_id: int = 0, generator: Optional[Generator] = None, dtype: dtype = ...,
                 qk_norm: bool = False) -> None: ...
    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """src [B, S] and tgt [B, T] token ids -> logits [B, T, tgt_vocab]."""

MultiHeadAttention = MultiheadAttention
EncoderLayer = TransformerEncoderLayer
DecoderLayer = TransformerDecoderLayer
