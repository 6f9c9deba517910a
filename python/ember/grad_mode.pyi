# Type stubs of ember.grad_mode (grad_mode.py).

from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

class no_grad:
    """Ops record no graph inside: `with ember.no_grad(): ...` or `@ember.no_grad()`."""

    def __enter__(self) -> no_grad: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __call__(self, fn: _F) -> _F:
        """fn run with grad mode off."""

class enable_grad:
    """Ops record a graph again inside, within an outer no_grad (a block or a decorator)."""

    def __enter__(self) -> enable_grad: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __call__(self, fn: _F) -> _F:
        """fn run with grad mode on."""

class set_grad_enabled:
    """Sets grad mode now (a function call) or for a block (`with`), then puts it back."""

    def __init__(self, mode: bool) -> None:
        """Grad mode on (True) or off (False), from now on."""
    def __enter__(self) -> set_grad_enabled: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __call__(self, fn: _F) -> _F:
        """fn run with grad mode set to mode."""
