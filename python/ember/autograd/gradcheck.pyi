# Type stubs of ember.autograd.gradcheck (gradcheck.py).

from typing import Callable, Optional, Sequence, Union

from .._C import GradcheckReport as GradcheckReport, Tensor

def gradcheck(func: Callable[..., Tensor], inputs: Union[Tensor, Sequence[Tensor]], eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3, seed: int = 1234,
              names: Optional[Sequence[str]] = None, check_forward_ad: bool = False) -> GradcheckReport:
    """Compares func's first derivatives for every input that requires grad with central
    differences, in float64 (with check_forward_ad, forward mode's too); returns the report
    (true when passed) rather than raising."""

def gradgradcheck(func: Callable[..., Tensor], inputs: Union[Tensor, Sequence[Tensor]], eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, seed: int = 1234,
                  names: Optional[Sequence[str]] = None, check_forward_ad: bool = False,
                  check_fwd_over_rev: bool = False) -> GradcheckReport:
    """Compares func's second derivatives (by double backward; with check_forward_ad or
    check_fwd_over_rev, forward over reverse too) with finite differences."""
