# Type stubs of ember.graph (graph.py).

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from ._C import Tensor
from .nn.module import Module

_Params = Union[Module, Mapping[str, Tensor], Sequence[Tuple[str, Tensor]], None]

def draw_graph(tensor: Tensor, params: _Params = None, path: Optional[str] = None, title: str = "",
               saturation: float = 0.99) -> str:
    """The backward graph of tensor as Graphviz DOT text; with `path`, also written there
    (.dot or .gv; .svg, .png or .pdf through Graphviz's dot). params names the leaves."""
def describe_graph(tensor: Tensor, params: _Params = None, saturation: float = 0.99) -> Dict[str, Any]:
    """The graph draw_graph draws, as data: ops, leaves, edges and saved_bytes."""

class record_grad_norms:
    """Inside, every backward pass this thread runs records in each op the norm of the
    gradient that reached it, which draw_graph shows."""

    def __enter__(self) -> record_grad_norms: ...
    def __exit__(self, *exc: Any) -> bool: ...

class graph_scopes:
    """Inside, the ops each module of `model` runs in its forward are labelled with the
    module's dotted name, so that draw_graph groups them by module."""

    def __init__(self, model: Module, name: str = "") -> None:
        """Labels the forwards of model's modules; the model's own ops get `name`."""
    def __enter__(self) -> graph_scopes: ...
    def __exit__(self, *exc: Any) -> bool: ...
