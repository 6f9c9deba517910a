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
Function. Unlike PyTorch's, forward returns one tensor."""

from .. import _C


class FunctionCtx:
    """What forward hands backward: save_for_backward(*tensors), saved_tensors,
    needs_input_grad (one bool per argument of apply), and any attribute set on it.
    Tensors kept as attributes rather than saved are not checked for in-place changes and
    keep the graph alive, as in PyTorch: save them."""

    def __init__(self):
        self._c = None  # the C++ context, while forward or backward runs
        self.needs_input_grad = ()

    def _context(self, what):
        if self._c is None:
            raise RuntimeError(f"{what} can only be used inside forward or backward")
        return self._c

    def save_for_backward(self, *tensors):
        self._context("save_for_backward").save_for_backward(tensors)

    @property
    def saved_tensors(self):
        return self._context("saved_tensors").saved_tensors()


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grads) and call
    apply(*args). backward returns one gradient per argument of apply (None for an
    argument that is not a tensor or needs none), as a tensor or a tuple."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a Function subclass must define forward(ctx, *args)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a Function subclass must define backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args):
        # the C++ side sees only the tensor arguments; the others are put back around them
        positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        n_args = len(args)

        def forward(ctx, tensors):
            full = list(args)
            for i, t in zip(positions, tensors):
                full[i] = t
            needs = [False] * n_args
            for k, i in enumerate(positions):
                needs[i] = ctx._c.needs_input_grad(k)
            ctx.needs_input_grad = tuple(needs)
            return cls.forward(ctx, *full)

        def backward(ctx, grad):
            grads = cls.backward(ctx, grad)
            if not isinstance(grads, (tuple, list)):
                grads = (grads,)
            if len(grads) == n_args:
                return [grads[i] for i in positions]
            return list(grads)  # a count that fits neither: ember's error names it

        return _C._function_apply(cls.__name__, FunctionCtx, forward, backward,
                                  [args[i] for i in positions])
