"""ember.autograd.functional, as torch.autograd.functional: derivatives of whole functions
over ember's (core/autograd_functional.h). `inputs` is a tensor or a tuple of tensors, and
func takes them as its arguments; the results have PyTorch's form (a tensor for a tensor
input, a tuple per input for a tuple) and carry no graph."""

from .. import _C
from ..grad_mode import no_grad


def _split(inputs):
    """(the inputs as a list, whether they came as one tensor)"""
    if isinstance(inputs, _C.Tensor):
        return [inputs], True
    return list(inputs), False


def _per_input(values, single):
    return values[0] if single else tuple(values)


def _vectors(v, single, what):
    if single:
        return [v] if isinstance(v, _C.Tensor) else list(v)
    if v is None:
        raise TypeError(f"{what}: v must be given (a tensor per input)")
    return [v] if isinstance(v, _C.Tensor) else list(v)


def _func(func):
    return lambda xs: func(*xs)


def jacobian(func, inputs):
    """J[i..., j...] = d func(x)[i...] / d x[j...]: a tensor, or a tuple with one per input."""
    xs, single = _split(inputs)
    return _per_input(_C._jacobian(_func(func), xs), single)


def hessian(func, inputs):
    """The Hessian of a one-element func: a tensor, or blocks H[a][b] as a tuple of tuples."""
    xs, single = _split(inputs)
    blocks = _C._hessian(_func(func), xs)
    if single:
        return blocks[0][0]
    return tuple(tuple(row) for row in blocks)


def vjp(func, inputs, v=None):
    """(func(inputs), v^T J); v may be omitted when func's value has one element."""
    xs, single = _split(inputs)
    if v is None:
        with no_grad():
            v = _C.ones_like(func(*xs))
    out, grads = _C._vjp(_func(func), xs, v)
    return out, _per_input(grads, single)


def jvp(func, inputs, v):
    """(func(inputs), J v), v a tensor per input."""
    xs, single = _split(inputs)
    return _C._jvp(_func(func), xs, _vectors(v, single, "jvp"))


def hvp(func, inputs, v):
    """(func(inputs), H v) of a one-element func, v a tensor per input."""
    xs, single = _split(inputs)
    out, prods = _C._hvp(_func(func), xs, _vectors(v, single, "hvp"))
    return out, _per_input(prods, single)
