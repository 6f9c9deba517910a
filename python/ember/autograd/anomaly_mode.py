"""Anomaly mode, as torch.autograd's: while on, each op checks its output and each
backward its gradients for NaN and Inf, and the error names the op and where it ran."""

from .. import _C


class detect_anomaly:
    """Anomaly mode on for a block (`with ember.autograd.detect_anomaly():`), or for a
    function as a decorator; what was set before comes back after."""

    def __init__(self, check_nan=True):
        self.mode = check_nan

    def __enter__(self):
        self._previous = _C.is_anomaly_enabled()
        _C._set_anomaly_enabled(self.mode)
        return self

    def __exit__(self, *exc):
        _C._set_anomaly_enabled(self._previous)
        return False

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with detect_anomaly(self.mode):
                return fn(*args, **kwargs)
        return wrapped


class set_detect_anomaly(detect_anomaly):
    """Sets anomaly mode now (a call) or for a block (`with`)."""

    def __init__(self, mode):
        super().__init__(mode)
        self._previous = _C.is_anomaly_enabled()
        _C._set_anomaly_enabled(mode)

    def __enter__(self):
        return self
