# Type stubs of ember.autograd.gradcheck (gradcheck.py).

from typing import Callable, Optional, Sequence, Union

from .._C import GradcheckReport as GradcheckReport, Tensor

def gradcheck(func: Callable[..., Tensor], inputs: Union[Tensor, Sequence[Tensor]], eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3, seed: int = 1234,
              names: Optional[Sequence[str]] = None) -> GradcheckReport:
    """Compares func's first derivatives for every input that requires grad with central
    differences, in float64; returns the report (true when passed) rather than raising."""

def gradgradcheck(func: Callable[..., Tensor], inputs: Union[Tensor, Sequence[Tensor]], eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, seed: int = 1234,
                  names: Optional[Sequence[str]] = None) -> GradcheckReport:
    """Compares func's second derivatives (by double backward) with finite differences."""
