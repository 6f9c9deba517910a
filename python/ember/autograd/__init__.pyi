# Type stubs of ember.autograd (__init__.py).

from typing import Optional, Sequence, Tuple, Union

from .. import _C
from .._C import is_anomaly_enabled as is_anomaly_enabled
from ..grad_mode import enable_grad as enable_grad, no_grad as no_grad, set_grad_enabled as set_grad_enabled
from . import anomaly_mode as anomaly_mode, forward_ad as forward_ad, function as function, functional as functional
from .anomaly_mode import detect_anomaly as detect_anomaly, set_detect_anomaly as set_detect_anomaly
from .function import Function as Function, FunctionCtx as FunctionCtx
from .gradcheck import gradcheck as gradcheck, gradgradcheck as gradgradcheck

_Tensors = Union[_C.Tensor, Sequence[_C.Tensor]]

def grad(outputs: _Tensors, inputs: _Tensors, grad_outputs: Optional[_Tensors] = None,
         retain_graph: Optional[bool] = None, create_graph: bool = False,
         allow_unused: bool = False) -> Tuple[Optional[_C.Tensor], ...]:
    """The gradients of outputs (weighted by grad_outputs; ones for one-element outputs)
    with respect to inputs, in their order, without touching .grad."""
