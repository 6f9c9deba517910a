# Type stubs of ember.nn.functional (functional.py).

from typing import Optional, Sequence, Tuple, Union

from .._C import Generator, Tensor
from .._C import log_softmax as log_softmax, masked_fill as masked_fill, relu as relu, softmax as softmax

def linear(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """input [..., in] @ weight[out, in]^T + bias[out]."""

def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU, exact (erf) or with approximate="tanh"."""

def dropout(input: Tensor, p: float = 0.5, training: bool = True, generator: Optional[Generator] = None) -> Tensor:
    """Zeroes elements with probability p and scales the rest by 1/(1-p) when training."""

def layer_norm(input: Tensor, normalized_shape: Union[int, Sequence[int]], weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Layer norm over the last dim only: normalized_shape is input.shape[-1]."""

def cross_entropy(input: Tensor, target: Tensor, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of logits [..., C] (classes last) against int64 targets [...];
    reduction="mean" only; 0 when every target is ignored."""

def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                                 generator: Optional[Generator] = None) -> Tuple[Tensor, Tensor]:
    """(output [..., L, Dv], weights [..., L, S]) of query [..., L, D] over key [..., S, D]
    and value [..., S, Dv]; attn_mask is bool, True = may attend."""
