"""ember.autograd.Function: a differentiable op written in Python, as torch.autograd.Function.

    class Cube(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3.0 * x ** 2

    y = Cube.apply(x)

ember's C++ Function records the node (core/function.h): forward runs with grad mode off,
backward may be differentiated again (create_graph) when written with ember ops, and a
wrong number of gradients or a gradient of the wrong shape is ember's error naming the
Function.

The C++ Function has one output. A forward returning a tuple is given to it as one flat
tensor, the differentiable outputs concatenated (they must share a dtype), and apply
returns views of that tensor's pieces, so each output has the graph behind it; backward
gets one gradient per output (zeros for an output not used, and for one marked
non-differentiable or not floating, which is returned as computed). A saved output comes
back as its piece of the saved flat tensor: a double backward flows through it."""

from .. import _C

_FLOATING = (_C.float32, _C.float64)


class FunctionCtx:
    """What forward hands backward: save_for_backward(*tensors), saved_tensors,
    needs_input_grad (one bool per argument of apply), mark_non_differentiable(*outputs),
    and any attribute set on it. Tensors kept as attributes rather than saved are not
    checked for in-place changes and keep the graph alive, as in PyTorch: save them."""

    def __init__(self):
        self._c = None  # the C++ context, while forward or backward runs
        self.needs_input_grad = ()
        self._to_save = ()
        self._non_differentiable = []
        self._layout = None  # a multi-output forward's _Layout

    def _context(self, what):
        if self._c is None:
            raise RuntimeError(f"{what} can only be used inside forward or backward")
        return self._c

    def save_for_backward(self, *tensors):
        self._context("save_for_backward")
        for t in tensors:
            if t is not None and not isinstance(t, _C.Tensor):
                raise TypeError(f"save_for_backward takes Tensors or None, got {type(t).__name__}")
        self._to_save = tensors

    def mark_non_differentiable(self, *outputs):
        """Outputs of forward that get no gradient (indices, masks): returned as computed."""
        self._context("mark_non_differentiable")
        self._non_differentiable.extend(outputs)

    @property
    def saved_tensors(self):
        saved = self._context("saved_tensors").saved_tensors()
        if self._layout is None:
            return saved
        return self._layout.saved(saved)


class _Layout:
    """Where a multi-output forward's differentiable outputs lie in the flat tensor."""

    def __init__(self, name, outputs, non_differentiable):
        self.outputs = outputs  # until results() has used them
        self.meta = [(o.shape, o.dtype) if isinstance(o, _C.Tensor) else None for o in outputs]
        self.pieces = {}  # output position -> (offset, numel, shape)
        offset, dtype = 0, None
        for k, o in enumerate(outputs):
            if not isinstance(o, _C.Tensor):
                raise TypeError(f"{name}.forward must return Tensors, got {type(o).__name__} at position {k}")
            if o.dtype not in _FLOATING or any(o is n for n in non_differentiable):
                continue
            if dtype is not None and o.dtype != dtype:
                raise TypeError(f"{name}.forward: the differentiable outputs must share a dtype; output {k} is "
                                f"{o.dtype}, the ones before {dtype}")
            dtype = o.dtype
            self.pieces[k] = (offset, o.numel(), o.shape)
            offset += o.numel()
        self.dtype = dtype or _C.float32
        self.saved_outputs = {}  # saved position -> output position

    def flat(self):
        parts = [self.outputs[k].reshape(-1) for k in self.pieces]
        return _C.cat(parts, 0) if parts else _C.zeros(0, dtype=self.dtype)

    def piece(self, flat, k):
        offset, n, shape = self.pieces[k]
        return flat.narrow(0, offset, n).reshape(shape)

    def to_save(self, tensors, flat):
        kept = []
        for i, t in enumerate(tensors):
            k = next((k for k in self.pieces if t is self.outputs[k]), None)
            if k is None:
                kept.append(t)
            else:  # saved through the flat output, which the C++ Function knows as its output
                self.saved_outputs[i] = k
                kept.append(None)
        return kept + [flat]

    def saved(self, saved):
        flat, saved = saved[-1], list(saved[:-1])
        for i, k in self.saved_outputs.items():
            saved[i] = self.piece(flat, k)
        return tuple(saved)

    def results(self, flat):
        out = tuple(self.piece(flat, k) if k in self.pieces else o.detach() for k, o in enumerate(self.outputs))
        self.outputs = None  # the node keeps this layout: not the forward's tensors
        return out

    def grads(self, grad):
        return [self.piece(grad, k) if k in self.pieces else _C.zeros(*shape, dtype=dtype)
                for k, (shape, dtype) in enumerate(self.meta)]


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grads) and call
    apply(*args). forward returns a tensor or a tuple of them; backward takes one gradient
    per output and returns one per argument of apply (None for an argument that is not a
    tensor or needs none), as a tensor or a tuple."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a Function subclass must define forward(ctx, *args)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a Function subclass must define backward(ctx, *grads)")

    @staticmethod
    def jvp(ctx, *tangents):
        """Forward mode's rule (optional): the output's tangent from one tangent per argument of
        apply (None for an argument that is not a tensor or has none). Without it, a tangent
        reaching the Function is an error naming it."""
        raise NotImplementedError("a Function subclass may define jvp(ctx, *tangents)")

    @classmethod
    def apply(cls, *args):
        # the C++ side sees only the tensor arguments; the others are put back around them
        positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        n_args = len(args)
        name = cls.__name__
        layout = []  # the multi-output forward's, once it has run

        def forward(ctx, tensors):
            full = list(args)
            for i, t in zip(positions, tensors):
                full[i] = t
            needs = [False] * n_args
            for k, i in enumerate(positions):
                needs[i] = ctx._c.needs_input_grad(k)
            ctx.needs_input_grad = tuple(needs)
            out = cls.forward(ctx, *full)
            if not isinstance(out, tuple):
                ctx._c.save_for_backward(ctx._to_save)
                return out  # one tensor, or what the C++ side names as wrong
            ctx._layout = _Layout(name, out, ctx._non_differentiable)
            flat = ctx._layout.flat()
            ctx._c.save_for_backward(ctx._layout.to_save(ctx._to_save, flat))
            layout.append(ctx._layout)
            return flat

        def backward(ctx, grad):
            grads = cls.backward(ctx, *ctx._layout.grads(grad)) if ctx._layout else cls.backward(ctx, grad)
            if not isinstance(grads, (tuple, list)):
                grads = (grads,)
            if len(grads) == n_args:
                return [grads[i] for i in positions]
            return list(grads)  # a count that fits neither: ember's error names it

        def jvp(ctx, tangents):
            if ctx._layout:
                raise RuntimeError(f"{name}: forward mode through a Function with several outputs is not supported")
            full = [None] * n_args
            for i, t in zip(positions, tangents):
                full[i] = t
            return cls.jvp(ctx, *full)

        has_jvp = cls.jvp is not Function.jvp
        out = _C._function_apply(name, FunctionCtx, forward, backward, [args[i] for i in positions],
                                 jvp if has_jvp else None)
        return layout[0].results(out) if layout else out
