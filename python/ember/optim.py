"""ember.optim, as torch.optim: SGD, Adam and AdamW with PyTorch's argument names and
update rules (optim/optimizer.h), over any parameters - a Python model's, a C++ layer's,
plain tensors that require grad - given as model.parameters() or model.named_parameters().
One parameter group; param_groups[0]["lr"] = ... sets the rate, as in PyTorch. The
schedules are ember's (optim/schedule.h): not bound to an optimizer, and stepped before
the optimizer's step (the rate they set is the one that step uses)."""

from . import _C

_optim = _C._optim


def _named(params):
    """(name, tensor) pairs: named_parameters() as given, plain tensors named by position
    ("0", "1", ... as PyTorch's state_dict numbers them)."""
    params = list(params)
    if not params:
        raise ValueError("optimizer got an empty parameter list")
    if isinstance(params[0], dict):
        raise TypeError("parameter groups do not exist in ember: pass the parameters themselves")
    if isinstance(params[0], tuple):
        return [(str(n), p) for n, p in params]
    return [(str(i), p) for i, p in enumerate(params)]


class _Group(dict):
    """param_groups[0]: writing a hyper-parameter sets it in the optimizer."""

    def __init__(self, optimizer):
        super().__init__(optimizer._hyper_py())
        self._optimizer = optimizer

    def __setitem__(self, key, value):
        self._optimizer._set(key, value)
        super().__setitem__(key, value)


class Optimizer:
    """What SGD, Adam and AdamW share: step(), zero_grad(), state_dict(), param_groups."""

    _impl = None

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        self._impl.step()
        return loss

    def zero_grad(self, set_to_none=True):
        for _, p in self._params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @property
    def param_groups(self):
        return [_Group(self)]

    def _hyper_py(self):
        return dict(self._impl.hyper(), params=[p for _, p in self._params])

    def _set(self, key, value):
        self._impl.set_hyper(key, float(value))

    def state_dict(self):
        """{"state": {name: {"step": n, slot: tensor, ...}}, "param_groups": [{hyper-
        parameters..., "params": names}]}: the state by parameter name (the names given, or
        positions), as a checkpoint stores it."""
        s = self._impl.state()
        state = {name: dict(ps.slots, step=ps.step) for name, ps in s.params.items()}
        group = dict(s.hyper, params=[n for n, _ in self._params])
        return {"state": state, "param_groups": [group], "kind": s.kind}

    def load_state_dict(self, state_dict):
        s = _optim.OptimizerState()
        s.kind = state_dict.get("kind", self._impl.kind())
        group = dict(state_dict["param_groups"][0])
        group.pop("params", None)
        s.hyper = {k: float(v) for k, v in group.items()}
        params = {}
        for name, entry in state_dict["state"].items():
            ps = _optim.ParamState()
            ps.step = int(entry["step"])
            ps.slots = {k: v for k, v in entry.items() if k != "step"}
            params[name] = ps
        s.params = params
        self._impl.load_state(s)


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        self._params = _named(params)
        self._impl = _optim.SGD(self._params, lr, momentum, dampening, weight_decay, nesterov)


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False):
        self._params = _named(params)
        self._impl = _optim.Adam(self._params, lr, betas[0], betas[1], eps, weight_decay, amsgrad)

    def _set(self, key, value):
        if key == "betas":
            self._impl.set_hyper("beta1", float(value[0]))
            self._impl.set_hyper("beta2", float(value[1]))
        else:
            super()._set(key, value)


class AdamW(Adam):
    """Adam with decoupled weight decay; weight_decay defaults to 1e-2, as PyTorch's."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        self._params = _named(params)
        self._impl = _optim.AdamW(self._params, lr, betas[0], betas[1], eps, weight_decay, amsgrad)


class _Schedule:
    """step(optimizer) sets the optimizer's rate for the step about to be taken and returns
    it; lr_at(step) is the rate of a step (1-based); last_step counts the steps taken."""

    _cpp = None

    def __init__(self, *args, **kwargs):
        self._impl = self._cpp(*args, **kwargs)

    def step(self, optimizer):
        return self._impl.step(optimizer._impl)

    def lr_at(self, step):
        return self._impl.lr_at(step)

    @property
    def last_step(self):
        return self._impl.last_step

    @last_step.setter
    def last_step(self, step):
        self._impl.last_step = step


class InverseSqrtSchedule(_Schedule):
    """InverseSqrtSchedule(d_model, warmup, factor=1.0): factor * d_model^-0.5 *
    min(step^-0.5, step * warmup^-1.5), as in "Attention Is All You Need"."""

    _cpp = _optim.InverseSqrtSchedule


class WarmupCosineSchedule(_Schedule):
    """WarmupCosineSchedule(peak_lr, warmup, total, min_lr=0.0): linear warm-up to peak_lr,
    then cosine decay to min_lr at step total."""

    _cpp = _optim.WarmupCosineSchedule


class ConstantSchedule(_Schedule):
    """ConstantSchedule(lr): lr at every step."""

    _cpp = _optim.ConstantSchedule
