"""gradcheck and gradgradcheck over ember's (core/gradcheck.h): analytic gradients
against central differences, in float64. Unlike PyTorch's, which return True or raise,
they return the report: `report.passed`, one row per input in `report.inputs`, and a
table when printed."""

from .. import _C
from .._C import GradcheckReport  # noqa: F401


def _as_list(inputs):
    return [inputs] if isinstance(inputs, _C.Tensor) else list(inputs)


def gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=1234, names=None, check_forward_ad=False):
    """Checks the first derivatives of func(*inputs) for every input that requires grad;
    with check_forward_ad, forward mode too (each row's .forward)."""
    return _C._gradcheck(lambda xs: func(*xs), _as_list(inputs), eps, atol, rtol, seed,
                         list(names or []), 1, check_forward_ad)


def gradgradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=1234, names=None, check_forward_ad=False,
                  check_fwd_over_rev=False):
    """Checks the second derivatives of func(*inputs) by double backward; with
    check_forward_ad (or PyTorch's name, check_fwd_over_rev), forward over reverse too."""
    return _C._gradcheck(lambda xs: func(*xs), _as_list(inputs), eps, atol, rtol, seed,
                         list(names or []), 2, check_forward_ad or check_fwd_over_rev)
