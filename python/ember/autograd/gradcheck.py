"""gradcheck and gradgradcheck over ember's (core/gradcheck.h): analytic gradients
against central differences, in float64. Unlike PyTorch's, which return True or raise,
they return the report: `report.passed`, one row per input in `report.inputs`, and a
table when printed."""

from .. import _C
from .._C import GradcheckReport  # noqa: F401


def _as_list(inputs):
    return [inputs] if isinstance(inputs, _C.Tensor) else list(inputs)


def gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=1234, names=None):
    """Checks the first derivatives of func(*inputs) for every input that requires grad."""
    return _C._gradcheck(lambda xs: func(*xs), _as_list(inputs), eps, atol, rtol, seed,
                         list(names or []), 1)


def gradgradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=1234, names=None):
    """Checks the second derivatives of func(*inputs) by double backward."""
    return _C._gradcheck(lambda xs: func(*xs), _as_list(inputs), eps, atol, rtol, seed,
                         list(names or []), 2)
