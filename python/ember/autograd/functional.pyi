# Type stubs of ember.autograd.functional (functional.py).

from typing import Any, Callable, Optional, Sequence, Tuple, Union

from .._C import Tensor

_Inputs = Union[Tensor, Sequence[Tensor]]

def jacobian(func: Callable[..., Tensor], inputs: _Inputs) -> Union[Tensor, Tuple[Tensor, ...]]:
    """J[i..., j...] = d func(x)[i...] / d x[j...]: a tensor, or a tuple with one per input."""

def hessian(func: Callable[..., Tensor], inputs: _Inputs) -> Union[Tensor, Tuple[Tuple[Tensor, ...], ...]]:
    """The Hessian of a one-element func: a tensor, or blocks H[a][b] as a tuple of tuples."""

def vjp(func: Callable[..., Tensor], inputs: _Inputs,
        v: Optional[Tensor] = None) -> Tuple[Tensor, Union[Tensor, Tuple[Tensor, ...]]]:
    """(func(inputs), v^T J); v may be omitted when func's value has one element."""

def jvp(func: Callable[..., Tensor], inputs: _Inputs, v: _Inputs) -> Tuple[Tensor, Any]:
    """(func(inputs), J v), v a tensor per input."""

def hvp(func: Callable[..., Tensor], inputs: _Inputs,
        v: _Inputs) -> Tuple[Tensor, Union[Tensor, Tuple[Tensor, ...]]]:
    """(func(inputs), H v) of a one-element func, v a tensor per input."""
