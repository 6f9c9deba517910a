"""ember.nn, as torch.nn: Module (subclassed in Python), Parameter, the layers of ember's
C++ library as modules, and functional."""

from .module import Module, Parameter, ModuleList, Sequential  # noqa: F401
from .layers import (  # noqa: F401
    Linear, Embedding, Dropout, LayerNorm, MultiheadAttention, MultiHeadAttention,
    TransformerEncoderLayer, TransformerDecoderLayer, EncoderLayer, DecoderLayer, Transformer, Packing,
)
from . import functional, init  # noqa: F401
