# Type stubs of ember.autograd.function (function.py).

from typing import Any, Optional, Tuple

from .._C import Tensor

class FunctionCtx:
    """What forward hands backward: save_for_backward(*tensors), saved_tensors,
    needs_input_grad, mark_non_differentiable(*outputs), and any attribute set on it."""

    needs_input_grad: Tuple[bool, ...]
    def __init__(self) -> None: ...
    def save_for_backward(self, *tensors: Tensor) -> None:
        """Keeps tensors for backward (checked there for in-place changes)."""
    def mark_non_differentiable(self, *outputs: Tensor) -> None:
        """Outputs of forward that get no gradient (indices, masks), returned as computed."""
    @property
    def saved_tensors(self) -> Tuple[Tensor, ...]:
        """The tensors given to save_for_backward, in order."""
    def __getattr__(self, name: str) -> Any:
        """Any attribute forward set (declared for type checkers: ctx.scale = ...)."""

class Function:
    """A differentiable op in Python: subclass with static forward(ctx, *args) and
    backward(ctx, *grads), then call apply(*args). forward returns a tensor or a tuple of
    them; backward takes one gradient per output."""

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any) -> Any:
        """Computes the output (grad mode off); saves what backward needs on ctx."""
    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Tensor) -> Any:
        """One gradient per argument of apply (None where there is none)."""
    @staticmethod
    def jvp(ctx: FunctionCtx, *tangents: Optional[Tensor]) -> Tensor:
        """Forward mode's rule (optional): the output's tangent from one tangent per argument."""
    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Runs forward and records backward in the graph."""
