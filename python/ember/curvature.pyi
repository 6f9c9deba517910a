# Type stubs of ember.curvature (curvature.py).

from typing import Callable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy

from ._C import Tensor
from .nn.module import Module

_Part = Tuple[str, Tensor, int, int, int]
_Params = Union[Module, Mapping[str, Tensor], Sequence[_Part]]
_Operator = Callable[[numpy.ndarray], numpy.ndarray]

class Eigen(NamedTuple):
    """Eigenvalues (decreasing), unit eigenvectors, residual bounds, products used, converged."""

    values: List[float]
    vectors: List[numpy.ndarray]
    residuals: List[float]
    steps: int
    converged: bool

class Trace(NamedTuple):
    """A trace estimate, its standard error and the number of probes."""

    value: float
    std_error: float
    probes: int

class SpectralDensity:
    """The eigenvalue density from stochastic Lanczos quadrature: per probe, `nodes` (Ritz
    values) and `weights` (summing to 1); `n` the operator's size."""

    n: int
    nodes: List[List[float]]
    weights: List[List[float]]
    def __init__(self, n: int, nodes: List[List[float]], weights: List[List[float]]) -> None:
        """A density from its nodes and weights."""
    def at(self, x: float, sigma: float) -> float:
        """The density at x, each node a Gaussian of width sigma."""
    def trace(self) -> float:
        """n times the mean over probes of sum(weights * nodes): the trace's estimate."""
    def range(self) -> Tuple[float, float]:
        """The smallest and largest node."""

def numel(params: _Params) -> int:
    """The number of elements of a set of parameters (the length of its vectors)."""
def head_parameters(model: Module, path: str, head: int) -> List[_Part]:
    """Head `head`'s block of the MultiheadAttention at dotted `path` of model: its rows of
    q_proj, k_proj and v_proj (weights and biases) and its columns of out_proj's weight."""

class LossHessian:
    """The Hessian of loss() with respect to params, recorded once; methods restrict it to a
    subset of them (default: all)."""

    def __init__(self, loss: Callable[[], Tensor], params: _Params) -> None:
        """Runs loss() and records its gradient with create_graph."""
    @property
    def loss(self) -> float:
        """The loss's value."""
    @property
    def products(self) -> int:
        """The Hessian-vector products run so far."""
    def hvp(self, v: Sequence[float], params: Optional[_Params] = None) -> numpy.ndarray:
        """H v on params, v a float64 vector of their elements."""
    def dense(self, params: Optional[_Params] = None) -> numpy.ndarray:
        """The block of the Hessian on params as an n x n NumPy array (n products)."""
    def gradient(self, params: Optional[_Params] = None) -> numpy.ndarray:
        """The loss's gradient on params, flat."""
    def top_eigen(self, k: int = 1, params: Optional[_Params] = None, max_steps: int = 100, tol: float = 1e-9,
                  seed: int = 0, order: str = "largest", start: Optional[Sequence[float]] = None) -> Eigen:
        """The k largest eigenvalues ("magnitude": of largest absolute value) and their
        eigenvectors, by Lanczos."""
    def trace(self, probes: int = 100, params: Optional[_Params] = None, seed: int = 0) -> Trace:
        """Hutchinson's estimate of the trace from `probes` random sign vectors."""
    def trace_blocks(self, blocks: Sequence[_Params], probes: int = 100, seed: int = 0) -> List[Trace]:
        """Several disjoint sets' traces from the same products (one per probe for all)."""
    def density(self, steps: int = 50, probes: int = 4, params: Optional[_Params] = None,
                seed: int = 0) -> SpectralDensity:
        """The eigenvalue density by stochastic Lanczos quadrature."""

def top_eigen(op: _Operator, n: int, k: int = 1, max_steps: int = 100, tol: float = 1e-9, seed: int = 0,
              order: str = "largest", start: Optional[Sequence[float]] = None) -> Eigen:
    """Lanczos on any symmetric operator: op(v) -> A v for float64 vectors of length n."""
def hutchinson(op: _Operator, n: int, probes: int = 100, seed: int = 0) -> Trace:
    """Hutchinson's trace of any symmetric operator op (float64 vectors of length n)."""
def spectral_density(op: _Operator, n: int, steps: int = 50, probes: int = 4, seed: int = 0) -> SpectralDensity:
    """Stochastic Lanczos quadrature on any symmetric operator op."""
