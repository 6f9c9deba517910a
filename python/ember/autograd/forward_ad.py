"""ember.autograd.forward_ad, as torch.autograd.forward_ad: dual tensors carry a tangent v
beside their values, and every op carries it on to its output as J v, in the same pass.

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, v)
        y = f(x)
        jv = forward_ad.unpack_dual(y).tangent

One level is open at a time (a nested one is an error); when it closes, every tangent set
in it vanishes. Inside a level, a backward with create_graph=True gives gradients that
carry tangents (forward-over-reverse: the tangent of a gradient is H v); a plain backward
through tangents is refused, since it would drop them."""

from collections import namedtuple

from .. import _C

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])
UnpackedDualTensor.__doc__ = "A dual tensor taken apart: its primal (a view) and its tangent (None when it has none)."


def enter_dual_level():
    """Opens a dual level and returns its number (an error when one is open already)."""
    return _C._enter_dual_level()


def exit_dual_level(*, level=None):
    """Closes the open dual level (level, when given, must be its number)."""
    _C._exit_dual_level(level)


class dual_level:
    """A dual level for a `with` block: `with forward_ad.dual_level(): ...`."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False


def make_dual(tensor, tangent, *, level=None):
    """A view of tensor carrying tangent (of its shape and dtype) in the open level."""
    _check_level(level)
    return _C._make_dual(tensor, tangent)


def unpack_dual(tensor, *, level=None):
    """(primal, tangent) of tensor: the tangent is None when it has none in the open level."""
    _check_level(level)
    primal, tangent = _C._unpack_dual(tensor)
    return UnpackedDualTensor(primal, tangent)


def _check_level(level):
    if level is None:
        return
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"level must be an int or None, got {type(level).__name__}")
    if level != _C._dual_level():
        raise RuntimeError(f"invalid level {level}: the open dual level is {_C._dual_level()} (0: none)")
