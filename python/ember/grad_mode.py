"""Grad mode as PyTorch's: no_grad() and enable_grad() are context managers and
decorators; set_grad_enabled(mode) sets it at once and, used with `with`, for a block.
Grad mode belongs to the thread, as in PyTorch and in ember's C++ library."""

import functools

from . import _C


class _GradMode:
    """Sets grad mode to `self.mode` for a block, then puts back what was there."""

    mode = True

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C._set_grad_enabled(self.mode)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_GradMode):
    """Ops record no graph inside: `with ember.no_grad(): ...` or `@ember.no_grad()`."""

    mode = False


class enable_grad(_GradMode):
    """Ops record a graph again inside, within an outer no_grad."""

    mode = True


class set_grad_enabled(_GradMode):
    """Sets grad mode now (a function call) or for a block (`with`)."""

    def __init__(self, mode):
        self._previous = _C.is_grad_enabled()
        self.mode = mode
        _C._set_grad_enabled(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False
