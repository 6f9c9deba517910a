"""ember.autograd, as torch.autograd: grad() computes gradients without touching .grad."""

from . import _C
from .grad_mode import no_grad, enable_grad, set_grad_enabled  # noqa: F401


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """The gradients of `outputs` (weighted by `grad_outputs`; ones for one-element
    outputs when omitted) with respect to `inputs`, as a tuple in their order. An input
    the outputs do not depend on is an error, or None with allow_unused=True."""
    return _C._grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused)
