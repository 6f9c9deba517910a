"""ember.optim, as torch.optim: SGD, Adam and AdamW with PyTorch's argument names and
update rules (optim/optimizer.h), over any parameters - a Python model's, a C++ layer's,
plain tensors that require grad - given as model.parameters() or model.named_parameters().
Parameter groups as PyTorch's (param_groups[i]["lr"] = ... sets a rate). The
schedules are ember's (optim/schedule.h): not bound to an optimizer, and stepped before
the optimizer's step (the rate they set is the one that step uses)."""

from . import _C

_optim = _C._optim


def _param_list(params, what):
    """The parameters of a group, as a list ("params" may be one tensor or an iterable)."""
    if isinstance(params, _C.Tensor):
        return [params]
    if isinstance(params, (str, bytes, dict)) or not hasattr(params, "__iter__"):
        raise TypeError(f"{what}: params must be an iterable of Tensors or of (name, Tensor) pairs, "
                        f"got {type(params).__name__}")
    return list(params)


class _Group(dict):
    """One of param_groups: its hyper-parameters and "params"; writing a hyper-parameter
    sets it in that group's optimizer."""

    def __init__(self, optimizer, index):
        super().__init__(optimizer._hyper_py(index))
        self._optimizer = optimizer
        self._index = index

    def __setitem__(self, key, value):
        if key == "params":
            raise KeyError("param_groups: a group's params cannot be replaced; use add_param_group")
        self._optimizer._set(self._index, key, value)
        super().__setitem__(key, value)


class Optimizer:
    """What SGD, Adam and AdamW share: step(), zero_grad(), state_dict(),
    load_state_dict(), param_groups and add_param_group(). params is an iterable of
    tensors or of (name, tensor) pairs, or of dicts - parameter groups - each with
    "params" and the hyper-parameters it sets differently from the defaults, as in
    PyTorch. Each group is stepped by its own C++ optimizer."""

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self._groups = []  # per group: ([(name, tensor)], the C++ optimizer)
        params = _param_list(params, type(self).__name__)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for group in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        """Adds a group: a dict with "params" and any hyper-parameters it sets."""
        name = type(self).__name__
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise TypeError(f"{name}.add_param_group: a group is a dict with 'params', got "
                            f"{type(param_group).__name__}")
        params = _param_list(param_group["params"], f"{name}.add_param_group")
        if not params:
            raise ValueError(f"{name}.add_param_group: the group's parameter list is empty")
        options = dict(self.defaults)
        for key, value in param_group.items():
            if key == "params":
                continue
            if key not in self.defaults:
                raise TypeError(f"{name}.add_param_group: unknown option '{key}'; the options are "
                                + ", ".join(self.defaults))
            options[key] = value
        start = sum(len(named) for named, _ in self._groups)
        if isinstance(params[0], tuple):
            named = [(str(n), p) for n, p in params]
        else:  # numbered across the groups, as PyTorch's state_dict numbers them
            named = [(str(start + i), p) for i, p in enumerate(params)]
        for n, p in named:
            if not isinstance(p, _C.Tensor):
                raise TypeError(f"{name}: parameter '{n}' is a {type(p).__name__}, not a Tensor")
        seen = {hash(p) for g, _ in self._groups for _, p in g}
        if any(hash(p) in seen for _, p in named):
            raise ValueError(f"{name}.add_param_group: some parameters appear in more than one parameter group")
        names = {n for g, _ in self._groups for n, _ in g}
        clash = [n for n, _ in named if n in names]
        if clash:
            raise ValueError(f"{name}.add_param_group: the name '{clash[0]}' is already another group's")
        self._groups.append((named, self._make(named, **options)))

    @property
    def _params(self):
        return [pair for named, _ in self._groups for pair in named]

    @property
    def _impl(self):
        """The C++ optimizer of a single-group optimizer (what a checkpoint stores)."""
        if len(self._groups) != 1:
            raise RuntimeError(f"{type(self).__name__} has {len(self._groups)} parameter groups; ember's "
                               "checkpoints and schedules' C++ side hold one optimizer with one group")
        return self._groups[0][1]

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for _, impl in self._groups:
            impl.step()
        return loss

    def zero_grad(self, set_to_none=True):
        for _, p in self._params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @property
    def param_groups(self):
        return [_Group(self, i) for i in range(len(self._groups))]

    def _hyper_py(self, index):
        named, impl = self._groups[index]
        hyper = {k: bool(v) if k in ("amsgrad", "nesterov") else v for k, v in impl.hyper().items()}
        return dict(hyper, params=[p for _, p in named])

    def _set(self, index, key, value):
        self._groups[index][1].set_hyper(key, float(value))

    def state_dict(self):
        """{"state": {name: {"step": n, slot: tensor, ...}}, "param_groups": [{hyper-
        parameters..., "params": names}, ...], "kind"}: the state by parameter name (the
        names given, or positions), as a checkpoint stores it."""
        state, groups, kind = {}, [], None
        for named, impl in self._groups:
            s = impl.state()
            kind = s.kind
            state.update({name: dict(ps.slots, step=ps.step) for name, ps in s.params.items()})
            groups.append(dict(s.hyper, params=[n for n, _ in named]))
        return {"state": state, "param_groups": groups, "kind": kind}

    def load_state_dict(self, state_dict):
        """Restores what state_dict gave (the same groups and names); nothing is changed when
        any group's state is refused."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self._groups):
            raise ValueError(f"{type(self).__name__}.load_state_dict: the state has {len(groups)} parameter "
                             f"groups, this optimizer {len(self._groups)}")
        states = []
        for (named, impl), group in zip(self._groups, groups):
            s = _optim.OptimizerState()
            s.kind = state_dict.get("kind", impl.kind())
            hyper = dict(group)
            hyper.pop("params", None)
            s.hyper = {k: float(v) for k, v in hyper.items()}
            params = {}
            for name, _ in named:
                entry = state_dict["state"].get(name)
                if entry is None:
                    continue
                ps = _optim.ParamState()
                ps.step = int(entry["step"])
                ps.slots = {k: v for k, v in entry.items() if k != "step"}
                params[name] = ps
            s.params = params
            states.append(s)
        before = [impl.state() for _, impl in self._groups]
        try:
            for (_, impl), s in zip(self._groups, states):
                impl.load_state(s)
        except Exception:
            for (_, impl), s in zip(self._groups, before):
                impl.load_state(s)
            raise


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    @staticmethod
    def _make(named, lr, momentum, dampening, weight_decay, nesterov):
        return _optim.SGD(named, lr, momentum, dampening, weight_decay, nesterov)


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad))

    _cpp = _optim.Adam

    @classmethod
    def _make(cls, named, lr, betas, eps, weight_decay, amsgrad):
        return cls._cpp(named, lr, betas[0], betas[1], eps, weight_decay, amsgrad)

    def _hyper_py(self, index):
        h = super()._hyper_py(index)
        h["betas"] = (h.pop("beta1"), h.pop("beta2"))
        return h

    def _set(self, index, key, value):
        if key == "betas":
            self._groups[index][1].set_hyper("beta1", float(value[0]))
            self._groups[index][1].set_hyper("beta2", float(value[1]))
        else:
            super()._set(index, key, value)


class AdamW(Adam):
    """Adam with decoupled weight decay; weight_decay defaults to 1e-2, as PyTorch's."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)

    _cpp = _optim.AdamW


class _Schedule:
    """step(optimizer) sets the optimizer's rate for the step about to be taken and returns
    it; lr_at(step) is the rate of a step (1-based); last_step counts the steps taken."""

    _cpp = None

    def __init__(self, *args, **kwargs):
        self._impl = self._cpp(*args, **kwargs)

    def step(self, optimizer):
        """Sets every parameter group's rate (the same for all) and returns it."""
        groups = optimizer._groups
        lr = self._impl.step(groups[0][1])
        for _, impl in groups[1:]:
            impl.set_hyper("lr", lr)
        return lr

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
