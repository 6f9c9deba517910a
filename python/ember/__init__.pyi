# Type stubs of the package ember: the names of ember._C (_C.pyi, where they are
# documented) and of the pure-Python modules, re-exported as __init__.py does.

from . import autograd as autograd, autocast_mode as autocast_mode, func as func, grad_mode as grad_mode, nn as nn
from . import optim as optim
from . import curvature as curvature, graph as graph
from . import serialization as serialization, watch as watch
from ._C import (
    Tensor as Tensor, dtype as dtype, float32 as float32, float64 as float64, int64 as int64,
    bool as bool, bfloat16 as bfloat16, float as float, double as double, long as long,
    Generator as Generator, manual_seed as manual_seed, default_generator as default_generator,
    tensor as tensor, zeros as zeros, ones as ones, empty as empty, full as full,
    zeros_like as zeros_like, ones_like as ones_like, full_like as full_like, empty_like as empty_like,
    rand_like as rand_like, randn_like as randn_like, arange as arange,
    eye as eye, randn as randn, rand as rand, randint as randint, from_numpy as from_numpy,
    from_dlpack as from_dlpack, to_dlpack as to_dlpack, set_num_threads as set_num_threads,
    get_num_threads as get_num_threads, get_rng_state as get_rng_state, set_rng_state as set_rng_state,
    initial_seed as initial_seed, memory_stats as memory_stats, empty_cache as empty_cache,
    reset_peak_memory_stats as reset_peak_memory_stats,
    add as add, sub as sub, mul as mul, div as div, pow as pow, maximum as maximum,
    minimum as minimum, neg as neg, exp as exp, log as log, sqrt as sqrt, rsqrt as rsqrt,
    abs as abs, tanh as tanh, sin as sin, cos as cos, sigmoid as sigmoid, relu as relu,
    square as square,
    eq as eq, ne as ne, lt as lt, le as le, gt as gt, ge as ge, logical_and as logical_and,
    logical_or as logical_or, logical_not as logical_not, isclose as isclose,
    allclose as allclose, equal as equal,
    sum as sum, mean as mean, amax as amax, amin as amin, max as max, min as min,
    argmax as argmax, argmin as argmin, var as var, std as std, norm as norm,
    logsumexp as logsumexp, cumsum as cumsum,
    matmul as matmul, mm as mm, bmm as bmm, outer as outer, diag as diag,
    diag_embed as diag_embed, trace as trace, tril as tril, triu as triu, softmax as softmax,
    log_softmax as log_softmax,
    masked_fill as masked_fill, where as where, cat as cat, concat as concat, stack as stack,
    split as split, chunk as chunk, index_select as index_select, gather as gather,
    is_grad_enabled as is_grad_enabled, is_autocast_enabled as is_autocast_enabled,
    bf16_products_available as bf16_products_available, set_printoptions as set_printoptions,
    graphviz_available as graphviz_available,
)
from .autocast_mode import autocast as autocast
from .grad_mode import enable_grad as enable_grad, no_grad as no_grad, set_grad_enabled as set_grad_enabled
from .graph import (
    describe_graph as describe_graph, draw_graph as draw_graph, graph_scopes as graph_scopes,
    record_grad_norms as record_grad_norms,
)
from .serialization import load as load, save as save

__version__: str
