"""Mixed precision as torch.autocast("cpu", dtype=torch.bfloat16): inside `with
ember.autocast():` (or a function decorated with `@ember.autocast()`), float32 matrix
products - matmul, Linear, attention's products - take bfloat16 inputs and sum in float32;
their backward runs at the precision their forward ran at, wherever backward() is called.
Everything else, and every tensor, stays float32. The setting belongs to the thread. See
docs/mixed-precision.md."""

import functools
import threading

from . import _C


class autocast:
    """bfloat16 matrix products for a block or a function; enabled=False turns them off
    inside an outer autocast. device_type must be "cpu" and dtype bfloat16 (or None)."""

    def __init__(self, device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
        if device_type != "cpu":
            raise ValueError(f"autocast: expected device_type 'cpu' (ember computes on the CPU), got {device_type!r}")
        bfloat16 = getattr(_C, "bfloat16", None)
        if dtype is not None and not (bfloat16 is not None and dtype == bfloat16):
            raise ValueError(f"autocast: expected dtype ember.bfloat16 (the precision ember's products take "
                             f"under autocast), got {dtype!r}")
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast: expected enabled to be a bool, got {type(enabled).__name__}")
        self.device_type, self.fast_dtype, self.enabled = device_type, bfloat16, enabled
        self._local = threading.local()  # each thread's settings before its entries, innermost last

    def _previous(self):
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def __enter__(self):
        self._previous().append(_C.is_autocast_enabled())
        _C._set_autocast_enabled(self.enabled)
        return self

    def __exit__(self, *exc):
        stack = self._previous()
        if not stack:
            raise RuntimeError("autocast: __exit__ without a matching __enter__ on this thread")
        _C._set_autocast_enabled(stack.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.device_type, enabled=self.enabled):
                return fn(*args, **kwargs)
        return wrapped
