# Type stubs of ember.optim (optim.py).

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from ._C import Tensor

_Params = Union[Iterable[Tensor], Iterable[Tuple[str, Tensor]], Iterable[Dict[str, Any]]]

class Optimizer:
    """What SGD, Adam and AdamW share: step(), zero_grad(), state_dict(), param_groups,
    add_param_group()."""

    defaults: Dict[str, Any]

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Updates every parameter from its .grad (after calling closure, whose loss it returns)."""
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Sets each parameter's .grad to None (or to zeros with set_to_none=False)."""
    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """The groups: each one's hyper-parameters and "params"; param_groups[i]["lr"] = ... sets a rate."""
    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Adds a group: a dict with "params" and the hyper-parameters it sets differently."""
    def state_dict(self) -> Dict[str, Any]:
        """{"state": {name: {"step": n, slot: tensor}}, "param_groups": [...]}, keyed by
        parameter name (the names given, or positions)."""
    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores what state_dict returned."""

class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay, as
    torch.optim.SGD."""

    def __init__(self, params: _Params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        """params: model.parameters(), model.named_parameters(), or parameter groups (dicts)."""

class Adam(Optimizer):
    """Adam (Kingma and Ba, 2015), with L2 weight decay and amsgrad, as torch.optim.Adam."""

    def __init__(self, params: _Params, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False) -> None:
        """params: model.parameters(), model.named_parameters(), or parameter groups (dicts)."""

class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter), as torch.optim.AdamW."""

    def __init__(self, params: _Params, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False) -> None:
        """params: model.parameters() or model.named_parameters(); weight_decay 1e-2 by default."""

class _Schedule:
    def step(self, optimizer: Optimizer) -> float:
        """Sets the optimizer's rate for the step about to be taken, and returns it."""
    def lr_at(self, step: int) -> float:
        """The rate of a step (1-based)."""
    @property
    def last_step(self) -> int:
        """The number of steps taken (settable, to resume)."""
    @last_step.setter
    def last_step(self, step: int) -> None: ...

class InverseSqrtSchedule(_Schedule):
    """factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), as in "Attention Is All
    You Need"; stepped before optimizer.step()."""

    def __init__(self, d_model: int, warmup: int, factor: float = 1.0) -> None: ...

class WarmupCosineSchedule(_Schedule):
    """Linear warm-up to peak_lr over warmup steps, then cosine decay to min_lr at step total."""

    def __init__(self, peak_lr: float, warmup: int, total: int, min_lr: float = 0.0) -> None: ...

class ConstantSchedule(_Schedule):
    """lr at every step."""

    def __init__(self, lr: float) -> None: ...
