# Type stubs of ember.nn.module (module.py).

from typing import (Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Set, Tuple,
                    TypeVar, Union)

from .._C import Tensor, dtype

_M = TypeVar("_M", bound=Module)

class _IncompatibleKeys(NamedTuple):
    missing_keys: List[str]
    unexpected_keys: List[str]

class Parameter(Tensor):
    """A tensor that a Module registers as a parameter when assigned to one of its
    attributes: a new leaf over data's memory, requiring grad unless told otherwise."""

    def __init__(self, data: Tensor, requires_grad: bool = True) -> None: ...

class RemovableHandle:
    """Returned by register_forward_hook and register_forward_pre_hook."""

    id: int
    def __init__(self, hooks: Dict[int, Callable[..., Any]]) -> None: ...
    def remove(self) -> None:
        """Removes the hook (harmless when done twice)."""

class Module:
    """The base of every model, as torch.nn.Module: subclass, call super().__init__(),
    assign Parameters, Modules and buffers as attributes, and define forward."""

    training: bool
    def __init__(self) -> None: ...
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; called through module(...), which runs the hooks around it."""
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...
    def register_parameter(self, name: str, param: Optional[Parameter]) -> None:
        """Registers param (a Parameter, or None) under name."""
    def register_buffer(self, name: str, tensor: Optional[Tensor], persistent: bool = True) -> None:
        """A tensor the module keeps but does not train; in state_dict when persistent."""
    def add_module(self, name: str, module: Optional[Module]) -> None:
        """Registers a sub-module under name."""
    def register_module(self, name: str, module: Optional[Module]) -> None:
        """The same as add_module."""
    def named_modules(self, memo: Optional[Set[int]] = None, prefix: str = "") -> Iterator[Tuple[str, Module]]:
        """(dotted name, module) for this module and every descendant, each once."""
    def modules(self) -> Iterator[Module]:
        """This module and every descendant."""
    def named_children(self) -> Iterator[Tuple[str, Module]]:
        """(name, module) for the direct sub-modules."""
    def children(self) -> Iterator[Module]:
        """The direct sub-modules."""
    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Parameter]]:
        """(dotted name, parameter) in registration order, shared ones once."""
    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The parameters, in registration order (for an optimizer)."""
    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Tensor]]:
        """(dotted name, buffer) in registration order."""
    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers, in registration order."""
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> Dict[str, Tensor]:
        """Parameters and persistent buffers by dotted name, sharing memory with the module's."""
    def load_state_dict(self, state_dict: Mapping[str, Tensor], strict: bool = True) -> _IncompatibleKeys:
        """Copies state_dict's values into the module's tensors; any missing or unexpected key
        (when strict), or shape or dtype mismatch, is one error and nothing is changed."""
    def train(self: _M, mode: bool = True) -> _M:
        """Training mode (dropout active) for this module and its descendants."""
    def eval(self: _M) -> _M:
        """train(False)."""
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Sets each parameter's .grad to None (or to zeros with set_to_none=False)."""
    def requires_grad_(self: _M, requires_grad: bool = True) -> _M:
        """Sets requires_grad on every parameter."""
    def to(self: _M, *args: Any, **kwargs: Any) -> _M:
        """Converts every parameter and floating buffer to dtype in place (each keeps its
        identity); as PyTorch's, also to(device), to(device, dtype), to(tensor) and the
        keywords device, dtype and non_blocking, the one device being "cpu"."""
    def double(self: _M) -> _M:
        """to(ember.float64)."""
    def float(self: _M) -> _M:
        """to(ember.float32)."""
    def register_forward_hook(self, hook: Callable[[Module, Tuple[Any, ...], Any], Any]) -> RemovableHandle:
        """hook(module, args, output) after every forward; a value it returns replaces the output."""
    def register_forward_pre_hook(self, hook: Callable[[Module, Tuple[Any, ...]], Any]) -> RemovableHandle:
        """hook(module, args) before every forward; a value it returns replaces the arguments."""
    def extra_repr(self) -> str:
        """What repr(module) shows between the parentheses, for a subclass to say."""

class ModuleList(Module):
    """Modules in a list, registered as "0", "1", ..."""

    def __init__(self, modules: Iterable[Module] = ()) -> None: ...
    def append(self, module: Module) -> ModuleList:
        """Adds module at the end."""
    def __getitem__(self, i: int) -> Module: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Module]: ...

class Sequential(ModuleList):
    """Applies its modules in order: Sequential(Linear(4, 8), Dropout(0.1))."""

    def __init__(self, *modules: Module) -> None: ...
    def forward(self, x: Any) -> Any:
        """Each module applied to the output of the one before."""
