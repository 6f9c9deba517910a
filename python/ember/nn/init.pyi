# Type stubs of ember.nn.init (init.py): initialisers drawing what ember's C++ ones draw.
from typing import Optional

from .._C import Generator, Tensor

def next_u64(generator: Generator) -> int:
    """The generator's next 64 random bits, as the C++ side draws a seed from it."""
def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """Fills tensor with U(a, b), as the C++ uniform(); returns it."""
def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """Fills tensor with N(mean, std^2), as the C++ normal(); returns it."""
def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Optional[Generator] = None) -> Tensor:
    """Fills tensor with U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)); returns it."""
def kaiming_uniform_(tensor: Tensor, a: float = 0.0, generator: Optional[Generator] = None) -> Tensor:
    """Fills tensor with U(-b, b), b = sqrt(2 / (1 + a^2)) * sqrt(3 / fan_in); returns it."""
def zeros_(tensor: Tensor) -> Tensor:
    """Fills tensor with zeros; returns it."""
def ones_(tensor: Tensor) -> Tensor:
    """Fills tensor with ones; returns it."""
