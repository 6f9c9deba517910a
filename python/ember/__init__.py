"""ember: tensors with reverse-mode autograd, PyTorch's names and semantics, over ember's
C++ library (ember._C). What exists so far is listed in docs/python.md."""

from . import _C
from ._C import (  # noqa: F401 - the public names
    Tensor, dtype, float32, float64, int64, bool, bfloat16, float, double, long,
    Generator, manual_seed, default_generator,
    tensor, zeros, ones, empty, full, zeros_like, ones_like, full_like, empty_like, rand_like, randn_like, arange, eye,
    randn, rand, randint, from_numpy, from_dlpack, to_dlpack,
    add, sub, mul, div, pow, maximum, minimum, neg, exp, log, sqrt, rsqrt, abs, tanh,
    sin, cos, sigmoid, relu, square,
    eq, ne, lt, le, gt, ge, logical_and, logical_or, logical_not, isclose, allclose, equal,
    sum, mean, amax, amin, max, min, argmax, argmin, var, std, norm, logsumexp, cumsum,
    matmul, mm, bmm, outer, diag, diag_embed, trace, tril, triu, softmax, log_softmax,
    masked_fill, where, cat, concat, stack, split, chunk, index_select, gather,
    is_grad_enabled, is_autocast_enabled, bf16_products_available, set_printoptions, graphviz_available,
    set_num_threads, get_num_threads, get_rng_state, set_rng_state, initial_seed, memory_stats, empty_cache,
    reset_peak_memory_stats,
)
from .grad_mode import no_grad, enable_grad, set_grad_enabled  # noqa: F401
from .autocast_mode import autocast  # noqa: F401
from . import autograd, curvature, func, graph, nn, optim, watch  # noqa: F401
from .serialization import save, load  # noqa: F401
from .graph import draw_graph, describe_graph, record_grad_norms, graph_scopes  # noqa: F401

__version__ = _C.__version__
