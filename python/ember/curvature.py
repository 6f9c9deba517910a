"""The curvature of a loss, as PyHessian computes it for PyTorch models, without forming the
Hessian: its top eigenvalues (Lanczos), trace (Hutchinson) and spectral density
(stochastic Lanczos quadrature), over any set of parameters - the whole model, a layer, one
attention head's block - through ember's double backward (fused attention included).

    h = ember.curvature.LossHessian(lambda: criterion(model(x), y), model)
    top = h.top_eigen(k=3)                      # top.values, top.vectors (NumPy)
    value, std_error = h.trace(probes=100)
    head = ember.curvature.head_parameters(model, "encoder.layers.0.self_attn", 2)
    h.top_eigen(params=head).values[0]          # the head's block of the Hessian

A set of parameters is a Module, a dict name -> Tensor, or a list of parts
(name, tensor, dim, start, length): `length` indices from `start` along `dim`, dim -1 the
whole tensor. Vectors are float64 NumPy arrays of the set's elements, in order.
"""

import math
import operator
from collections import namedtuple

from . import _C

Eigen = namedtuple("Eigen", "values vectors residuals steps converged")
Eigen.__doc__ = "Eigenvalues (decreasing), unit eigenvectors, residual bounds, products used, converged."
Trace = namedtuple("Trace", "value std_error probes")
Trace.__doc__ = "A trace estimate, its standard error and the number of probes."


class SpectralDensity:
    """The eigenvalue density from stochastic Lanczos quadrature: per probe, `nodes` (Ritz
    values) and `weights` (summing to 1); `n` the operator's size."""

    def __init__(self, n, nodes, weights):
        self.n, self.nodes, self.weights = n, nodes, weights

    def at(self, x, sigma):
        """The density at x, each node a Gaussian of width sigma."""
        if not sigma > 0:
            raise ValueError(f"SpectralDensity.at: sigma must be positive, got {sigma}")
        s = 0.0
        for nodes, weights in zip(self.nodes, self.weights):
            for node, w in zip(nodes, weights):
                s += w * math.exp(-0.5 * ((x - node) / sigma) ** 2)
        return s / (len(self.nodes) * sigma * math.sqrt(2 * math.pi))

    def trace(self):
        """n times the mean over probes of sum(weights * nodes): the trace's estimate."""
        total = sum(sum(w * x for x, w in zip(nodes, weights)) for nodes, weights in zip(self.nodes, self.weights))
        return self.n * total / len(self.nodes)

    def range(self):
        """The smallest and largest node."""
        return min(min(n) for n in self.nodes if n), max(max(n) for n in self.nodes if n)


def _int(value, name, fn):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}") from None


def _seed(seed, fn):
    seed = _int(seed, "seed", fn)
    if not 0 <= seed < 2 ** 64:
        raise ValueError(f"{fn}: seed must be in [0, 2**64), got {seed}")
    return seed


def _parts(params, fn):
    """The parts of a Module, a dict name -> Tensor, or a list of parts."""
    if hasattr(params, "named_parameters"):
        return [(name, t, -1, 0, 0) for name, t in params.named_parameters() if t.requires_grad]
    if isinstance(params, dict):
        params = [(name, t, -1, 0, 0) for name, t in params.items()]
    parts = []
    for p in params:
        if not (isinstance(p, tuple) and len(p) == 5 and isinstance(p[0], str) and isinstance(p[1], _C.Tensor)):
            raise TypeError(f"{fn}: expected parts (name, tensor, dim, start, length), got {p!r:.80}")
        parts.append((p[0], p[1], _int(p[2], "dim", fn), _int(p[3], "start", fn), _int(p[4], "length", fn)))
    if not parts:
        raise ValueError(f"{fn}: expected at least one parameter, got none")
    return parts


def numel(params):
    """The number of elements of a set of parameters (the length of its vectors)."""
    total = 0
    for _, t, dim, start, length in _parts(params, "numel"):
        total += t.numel() if dim < 0 else t.numel() // t.shape[dim] * length
    return total


def head_parameters(model, path, head):
    """Head `head`'s block of the MultiheadAttention at dotted `path` of model: its rows of
    q_proj, k_proj and v_proj (weights and biases) and its columns of out_proj's weight."""
    from .nn.layers import _CppModule
    head = _int(head, "head", "head_parameters")
    for prefix, mod in model._tensor_owners():
        if not isinstance(mod, _CppModule):
            continue
        if prefix and path != prefix and not path.startswith(prefix + "."):
            continue
        rest = path[len(prefix) + 1:] if prefix and path != prefix else ("" if prefix else path)
        try:
            parts = _C._curvature._head_parameters(mod._impl, rest, head)
        except RuntimeError as e:
            if "is not a MultiHeadAttention" in str(e):
                continue
            raise
        # named from the C++ layer: put the Python prefix in front
        return [((prefix + "." if prefix else "") + n, t, d, s, l) for n, t, d, s, l in parts]
    raise ValueError(f"head_parameters: '{path}' is not a MultiheadAttention of the model")


class LossHessian:
    """The Hessian of loss() with respect to params (see the module's doc), recorded once:
    loss() runs here, its gradient is recorded with create_graph, and each product H v is one
    backward pass through that gradient's graph. Methods restrict it to a subset (`params`,
    default: all): that subset's diagonal block."""

    def __init__(self, loss, params):
        if not callable(loss):
            raise TypeError(f"LossHessian: loss must be callable, got {type(loss).__name__}")
        self._parts = _parts(params, "LossHessian")
        self._h = _C._curvature.LossHessian(loss, self._parts)

    @property
    def loss(self):
        """The loss's value."""
        return self._h.loss

    @property
    def products(self):
        """The Hessian-vector products run so far."""
        return self._h.products

    def _of(self, params, fn):
        return self._parts if params is None else _parts(params, fn)

    def hvp(self, v, params=None):
        """H v on params, v a float64 vector of their elements."""
        return self._h._apply(self._of(params, "LossHessian.hvp"), v)

    def dense(self, params=None):
        """The block of the Hessian on params as an n x n NumPy array (n products)."""
        return self._h._dense(self._of(params, "LossHessian.dense"))

    def gradient(self, params=None):
        """The loss's gradient on params, flat."""
        return self._h._gradient(self._of(params, "LossHessian.gradient"))

    def top_eigen(self, k=1, params=None, max_steps=100, tol=1e-9, seed=0, order="largest", start=None):
        """The k largest eigenvalues (order "magnitude": of largest absolute value) and their
        eigenvectors, by Lanczos with full reorthogonalisation from a random start (or
        `start`)."""
        fn = "top_eigen"
        d = self._h._top_eigen(self._of(params, fn), _int(k, "k", fn), _int(max_steps, "max_steps", fn), float(tol),
                               _seed(seed, fn), order, [] if start is None else [float(x) for x in start])
        return Eigen(**d)

    def trace(self, probes=100, params=None, seed=0):
        """Hutchinson's estimate of the trace from `probes` random sign vectors: (value,
        std_error, probes)."""
        return self.trace_blocks([self._of(params, "trace")], probes, seed)[0]

    def trace_blocks(self, blocks, probes=100, seed=0):
        """Several disjoint sets' traces from the same products (one per probe for all)."""
        fn = "trace_blocks"
        parts = [_parts(b, fn) for b in blocks]
        return [Trace(*t) for t in self._h._trace_blocks(parts, _int(probes, "probes", fn), _seed(seed, fn))]

    def density(self, steps=50, probes=4, params=None, seed=0):
        """The eigenvalue density by stochastic Lanczos quadrature: a SpectralDensity."""
        fn = "density"
        return SpectralDensity(*self._h._density(self._of(params, fn), _int(steps, "steps", fn),
                                                 _int(probes, "probes", fn), _seed(seed, fn)))


def top_eigen(op, n, k=1, max_steps=100, tol=1e-9, seed=0, order="largest", start=None):
    """Lanczos on any symmetric operator: op(v) -> A v for float64 vectors of length n."""
    fn = "top_eigen"
    d = _C._curvature._top_eigen_of(op, _int(n, "n", fn), _int(k, "k", fn), _int(max_steps, "max_steps", fn),
                                    float(tol), _seed(seed, fn), order,
                                    [] if start is None else [float(x) for x in start])
    return Eigen(**d)


def hutchinson(op, n, probes=100, seed=0):
    """Hutchinson's trace of any symmetric operator op (float64 vectors of length n)."""
    fn = "hutchinson"
    return Trace(*_C._curvature._hutchinson_of(op, _int(n, "n", fn), _int(probes, "probes", fn), _seed(seed, fn)))


def spectral_density(op, n, steps=50, probes=4, seed=0):
    """Stochastic Lanczos quadrature on any symmetric operator op."""
    fn = "spectral_density"
    return SpectralDensity(*_C._curvature._density_of(op, _int(n, "n", fn), _int(steps, "steps", fn),
                                                      _int(probes, "probes", fn), _seed(seed, fn)))
