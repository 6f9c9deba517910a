# Type stubs of ember.autograd.anomaly_mode (anomaly_mode.py).

from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

class detect_anomaly:
    """Anomaly mode for a block (`with ember.autograd.detect_anomaly():`) or a function: an
    op whose output, or a backward whose gradient, holds NaN or Inf is an error naming it."""

    def __init__(self, check_nan: bool = True) -> None:
        """check_nan=False turns anomaly mode off inside instead."""
    def __enter__(self) -> detect_anomaly: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __call__(self, fn: _F) -> _F:
        """fn run in anomaly mode."""

class set_detect_anomaly(detect_anomaly):
    """Sets anomaly mode now (a call) or for a block (`with`), then puts it back."""

    def __init__(self, mode: bool) -> None:
        """Anomaly mode on (True) or off (False), from now on."""
    def __enter__(self) -> set_detect_anomaly: ...
