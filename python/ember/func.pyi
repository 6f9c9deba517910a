# Type stubs of ember.func.

from typing import Any, Callable, Dict, Sequence, Tuple, Union

from . import _C

def jvp(func: Callable[..., _C.Tensor], primals: Sequence[_C.Tensor],
        tangents: Sequence[_C.Tensor]) -> Tuple[_C.Tensor, _C.Tensor]:
    """(func(*primals), J tangents) by forward mode; primals and tangents are tuples."""

def hvp(func: Callable[..., _C.Tensor], primals: Sequence[_C.Tensor],
        tangents: Sequence[_C.Tensor]) -> Tuple[_C.Tensor, Tuple[_C.Tensor, ...]]:
    """(func(*primals), H tangents) of a one-element func, by forward-over-reverse."""

def linearize(func: Callable[..., _C.Tensor], *primals: _C.Tensor) -> Tuple[_C.Tensor, Callable[..., _C.Tensor]]:
    """(func(*primals), jvp_fn): jvp_fn(*tangents) gives J tangents at the same point."""

def jacfwd(func: Callable[..., _C.Tensor], argnums: Union[int, Tuple[int, ...]] = 0) -> Callable[..., Any]:
    """A function giving func's Jacobian with respect to argument argnums (a tuple of
    positions: a tuple of Jacobians), by forward mode."""

def hessian(func: Callable[..., _C.Tensor], argnums: Union[int, Tuple[int, ...]] = 0) -> Callable[..., Any]:
    """A function giving the Hessian of a one-element func with respect to argument argnums
    (a tuple of positions: the blocks H[a][b] as a tuple of tuples), by forward-over-reverse."""

def per_sample_grads(model: Any, batch_size: int, losses: Callable[[], _C.Tensor]) -> Dict[str, _C.Tensor]:
    """Each parameter's per-example gradients: name -> [batch_size, *param.shape], row b the
    gradient of losses()[b] alone, from one batched forward (ember's layers' parameters only)."""

def per_sample_norms(grads: Dict[str, _C.Tensor]) -> _C.Tensor:
    """The norm of each example's whole gradient: a float64 tensor [B]."""

def clipped_mean(grads: Dict[str, _C.Tensor], max_norm: float) -> Dict[str, _C.Tensor]:
    """Each example's gradient scaled down to norm max_norm when longer, then averaged."""

def gradient_noise(grads: Dict[str, _C.Tensor], prefix: str = "") -> Dict[str, float]:
    """The batch's gradient noise over the parameters whose names start with prefix."""
