# Type stubs of ember.autocast_mode (autocast_mode.py).

from typing import Any, Callable, Optional, TypeVar

from ._C import dtype as _dtype

_F = TypeVar("_F", bound=Callable[..., Any])

class autocast:
    """bfloat16 matrix products (float32 sums) for a block (`with`) or a function (a
    decorator); enabled=False turns them off inside an outer autocast."""

    device_type: str
    fast_dtype: Optional[_dtype]
    enabled: bool
    def __init__(self, device_type: str = "cpu", dtype: Optional[_dtype] = None, enabled: bool = True,
                 cache_enabled: Optional[bool] = None) -> None:
        """device_type "cpu", dtype ember.bfloat16 or None; cache_enabled is accepted and ignored."""
    def __enter__(self) -> autocast: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __call__(self, fn: _F) -> _F:
        """fn run under this autocast setting."""
