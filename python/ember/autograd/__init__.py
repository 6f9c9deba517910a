"""ember.autograd, as torch.autograd: grad() computes gradients without touching .grad;
Function defines differentiable ops in Python; functional holds jacobian, hessian, vjp,
jvp and hvp; forward_ad holds forward mode's dual tensors; gradcheck and gradgradcheck compare gradients with finite differences;
detect_anomaly names the op that produced a NaN or Inf."""

from .. import _C
from ..grad_mode import no_grad, enable_grad, set_grad_enabled  # noqa: F401
from .._C import is_anomaly_enabled  # noqa: F401
from .anomaly_mode import detect_anomaly, set_detect_anomaly  # noqa: F401
from .function import Function, FunctionCtx  # noqa: F401
from .gradcheck import gradcheck, gradgradcheck  # noqa: F401
from . import forward_ad, functional  # noqa: F401


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """The gradients of `outputs` (weighted by `grad_outputs`; ones for one-element
    outputs when omitted) with respect to `inputs`, as a tuple in their order. An input
    the outputs do not depend on is an error, or None with allow_unused=True."""
    return _C._grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused)
