# Type stubs of ember.nn (__init__.py).

from . import functional as functional, init as init, layers as layers, module as module
from .layers import (
    DecoderLayer as DecoderLayer, Dropout as Dropout, Embedding as Embedding, EncoderLayer as EncoderLayer,
    LayerNorm as LayerNorm, Linear as Linear, MultiHeadAttention as MultiHeadAttention,
    MultiheadAttention as MultiheadAttention, Packing as Packing, Transformer as Transformer,
    TransformerDecoderLayer as TransformerDecoderLayer, TransformerEncoderLayer as TransformerEncoderLayer,
)
from .module import Module as Module, ModuleList as ModuleList, Parameter as Parameter, Sequential as Sequential
