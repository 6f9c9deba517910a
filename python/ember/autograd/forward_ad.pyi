# Type stubs of ember.autograd.forward_ad.

from typing import NamedTuple, Optional

from .. import _C

class UnpackedDualTensor(NamedTuple):
    """A dual tensor taken apart: its primal (a view) and its tangent (None when it has none)."""
    primal: _C.Tensor
    tangent: Optional[_C.Tensor]

def enter_dual_level() -> int:
    """Opens a dual level and returns its number (an error when one is open already)."""

def exit_dual_level(*, level: Optional[int] = None) -> None:
    """Closes the open dual level (level, when given, must be its number)."""

class dual_level:
    """A dual level for a `with` block: `with forward_ad.dual_level(): ...`."""
    def __enter__(self) -> int:
        """Opens the level."""
    def __exit__(self, *exc: object) -> bool:
        """Closes the level."""

def make_dual(tensor: _C.Tensor, tangent: _C.Tensor, *, level: Optional[int] = None) -> _C.Tensor:
    """A view of tensor carrying tangent (of its shape and dtype) in the open level."""

def unpack_dual(tensor: _C.Tensor, *, level: Optional[int] = None) -> UnpackedDualTensor:
    """(primal, tangent) of tensor: the tangent is None when it has none in the open level."""
