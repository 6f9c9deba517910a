"""Drawing the backward graph, as torchviz's make_dot draws PyTorch's: draw_graph(tensor,
params=dict(model.named_parameters())) gives the graph as Graphviz DOT text, and writes it
(or renders it as SVG, PNG or PDF through Graphviz's dot) to `path`. Each op shows its
output's shape and dtype, the bytes it keeps for backward, the norm of the gradient that
reached it (after a backward run under record_grad_norms()), and a red fill where a
softmax saturated; ops run under graph_scopes(model) are grouped by module.

    with ember.graph_scopes(model), ember.record_grad_norms():
        loss = criterion(model(x), y)
        loss.backward(retain_graph=True)
    ember.draw_graph(loss, params=model, path="graph.svg")
"""

import threading

from . import _C

_local = threading.local()  # this thread's graph_scopes, innermost last


def _named_params(params):
    """(name, tensor) pairs from None, a Module, or a dict (or pairs) of tensors."""
    if params is None:
        return []
    if hasattr(params, "named_parameters"):
        return list(params.named_parameters())
    items = params.items() if isinstance(params, dict) else params
    pairs = []
    for item in items:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError("draw_graph: params must be a Module or a dict of name -> Tensor, got an item "
                            f"of type {type(item).__name__}")
        name, t = item
        if not isinstance(name, str) or not isinstance(t, _C.Tensor):
            raise TypeError("draw_graph: params must be a Module or a dict of name -> Tensor, got an item "
                            f"({type(name).__name__}, {type(t).__name__})")
        pairs.append((name, t))
    return pairs


def _check_saturation(saturation, fn):
    if not isinstance(saturation, (int, float)) or not 0 < saturation < 1:
        raise ValueError(f"{fn}: saturation must be a number in (0, 1), got {saturation!r}")


def draw_graph(tensor, params=None, path=None, title="", saturation=0.99):
    """The backward graph of tensor as Graphviz DOT text; with `path`, also written there
    (a .dot or .gv file; .svg, .png or .pdf rendered through Graphviz's dot, the DOT text
    beside it). params (a Module, or a dict of name -> Tensor) names the leaves; a softmax
    row counts as saturated when its largest weight is above `saturation`."""
    if not isinstance(tensor, _C.Tensor):
        raise TypeError(f"draw_graph: expected a Tensor, got {type(tensor).__name__}")
    _check_saturation(saturation, "draw_graph")
    named = _named_params(params)
    if path is None:
        return _C._graph_dot(tensor, named, title, saturation)
    return _C._draw_graph(tensor, str(path), named, title, saturation)


def describe_graph(tensor, params=None, saturation=0.99):
    """The graph draw_graph draws, as data: {"ops": [...], "leaves": [...], "edges":
    [(kind, from, to, input)], "saved_bytes": n}, each op a dict of name, shape, dtype,
    saved_bytes, released, grad_norm, module, where and saturated_share (None where
    unknown), ops[0] the op that produced tensor."""
    if not isinstance(tensor, _C.Tensor):
        raise TypeError(f"describe_graph: expected a Tensor, got {type(tensor).__name__}")
    _check_saturation(saturation, "describe_graph")
    return _C._describe_graph(tensor, _named_params(params), saturation)


class record_grad_norms:
    """Inside, every backward pass this thread runs records in each op the norm of the
    gradient that reached it, which draw_graph shows."""

    def __enter__(self):
        self._recording = _C._GradNormRecording()
        self._recording.__enter__()
        return self

    def __exit__(self, *exc):
        self._recording.__exit__(*exc)
        return False


class graph_scopes:
    """Inside, the ops each module of `model` runs in its forward (on this thread) are
    labelled with the module's dotted name, so that draw_graph groups them by module; the
    model's own ops get `name` (none when empty)."""

    def __init__(self, model, name=""):
        self._names = {}
        for sub, module in model.named_modules():
            full = ".".join(p for p in (name, sub) if p)
            self._names.setdefault(id(module), (module, full))

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc):
        stack = getattr(_local, "stack", None)
        if not stack or self not in stack:
            raise RuntimeError("graph_scopes: __exit__ without a matching __enter__ on this thread")
        # the innermost, or one left out of order: removed wherever it is
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                del stack[i]
                break
        return False


def _active():
    """The innermost graph_scopes of this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def _tensors(obj):
    """The tensors in a forward's arguments or result (one level of tuples, lists, dicts)."""
    if isinstance(obj, _C.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (tuple, list)):
        return [t for t in obj if isinstance(t, _C.Tensor)]
    return []


def _labelled_forward(scopes, module, args, kwargs):
    """module.forward(*args, **kwargs), its ops labelled with its name (a C++ layer's
    sub-layers with theirs)."""
    _, name = scopes._names.get(id(module), (None, ""))
    impl = module.__dict__.get("_impl")
    if impl is not None:
        with _C._nn._GraphScopes(impl, name):
            out = module.forward(*args, **kwargs)
    else:
        out = module.forward(*args, **kwargs)
    if name:
        _C._nn.label_ops(name, _tensors(args) + _tensors(kwargs), _tensors(out))
    return out
