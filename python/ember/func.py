"""ember.func, as torch.func: transforms of functions computed by forward mode
(ember.autograd.forward_ad). func takes tensors as its arguments and returns one tensor;
results carry no graph. Each opens the only dual level, so none may be open around it.

    jvp(f, primals, tangents)    (f(*primals), J v): one forward pass carrying the tangents
    linearize(f, *primals)       (f(*primals), a function of tangents giving J v)
    jacfwd(f, argnums=0)(*args)  the Jacobian by forward mode, one pass per input element
    hvp(f, primals, tangents)    (f(*primals), H v) by forward-over-reverse
    hessian(f, argnums=0)(*args) the Hessian by forward-over-reverse, one pass per element
    per_sample_grads(model, B, losses)  each parameter's per-example gradients [B, ...]

ember.autograd.functional has the same derivatives by reverse mode only."""

from . import _C


def _tensors(values, what):
    if isinstance(values, _C.Tensor):
        raise TypeError(f"{what} must be a tuple of tensors, got a Tensor (write ({what[:-1]},))")
    values = tuple(values)
    for v in values:
        if not isinstance(v, _C.Tensor):
            raise TypeError(f"{what} must be a tuple of tensors, got an element of type {type(v).__name__}")
    return list(values)


def _argnums(argnums, n):
    """(the argument positions differentiated, whether argnums was one int)"""
    single = isinstance(argnums, int)
    nums = [argnums] if single else list(argnums)
    for a in nums:
        if not isinstance(a, int) or not -n <= a < n:
            raise ValueError(f"argnums {argnums!r} is out of range for {n} positional arguments")
    return [a % n for a in nums], single


def _of_some(func, args, nums):
    """func as a function of the arguments at positions nums, the others held."""
    def call(xs):
        full = list(args)
        for a, x in zip(nums, xs):
            full[a] = x
        return func(*full)
    return call


def jvp(func, primals, tangents):
    """(func(*primals), J tangents) by forward mode; primals and tangents are tuples."""
    xs = _tensors(primals, "primals")
    return _C._func_jvp(lambda ys: func(*ys), xs, _tensors(tangents, "tangents"))


def hvp(func, primals, tangents):
    """(func(*primals), H tangents) of a one-element func, by forward-over-reverse."""
    xs = _tensors(primals, "primals")
    out, prods = _C._func_hvp(lambda ys: func(*ys), xs, _tensors(tangents, "tangents"))
    return out, tuple(prods)


def linearize(func, *primals):
    """(func(*primals), jvp_fn), as torch.func.linearize: jvp_fn(*tangents) gives J tangents
    at the same point (copied now) for any tangents, each call a forward pass carrying them."""
    xs = _tensors(primals, "primals")
    out, jv = _C._linearize(lambda ys: func(*ys), xs)
    return out, lambda *tangents: jv(_tensors(tangents, "tangents"))


def jacfwd(func, argnums=0):
    """A function giving func's Jacobian with respect to argument argnums (a tuple of
    positions: a tuple of Jacobians), by forward mode."""
    def jacobian(*args):
        nums, single = _argnums(argnums, len(args))
        J = _C._jacfwd(_of_some(func, args, nums), [args[a] for a in nums])
        return J[0] if single else tuple(J)
    return jacobian


def hessian(func, argnums=0):
    """A function giving the Hessian of a one-element func with respect to argument argnums
    (a tuple of positions: the blocks H[a][b] as a tuple of tuples), by forward-over-reverse."""
    def hess(*args):
        nums, single = _argnums(argnums, len(args))
        H = _C._func_hessian(_of_some(func, args, nums), [args[a] for a in nums])
        return H[0][0] if single else tuple(tuple(row) for row in H)
    return hess


def per_sample_grads(model, batch_size, losses):
    """Each parameter's per-example gradients, as torch.func.vmap(grad(...)) gives them: a
    dict name -> [batch_size, *param.shape], row b the gradient of losses()[b] alone.
    losses() runs model on the batch and returns every example's loss [batch_size]; one
    batched forward and two backward passes compute all of them, exactly (ember's
    nn::per_sample_grads). The parameters must be those of ember's layers (Linear,
    LayerNorm, Embedding and the layers built of them: attention, Transformer); a Python
    Parameter is refused by name. .grad is not touched."""
    from .nn.layers import _CppModule
    import operator
    try:
        batch_size = operator.index(batch_size)
    except TypeError:
        raise TypeError(f"per_sample_grads: batch_size must be an int, got {type(batch_size).__name__}") from None
    if batch_size < 1:
        raise ValueError(f"per_sample_grads: batch_size must be at least 1, got {batch_size}")
    roots = []
    for prefix, mod in model._tensor_owners():
        if isinstance(mod, _CppModule):
            roots.append((prefix, mod._impl))
            continue
        for name, p in mod._own_parameters():
            if p.requires_grad:
                full = prefix + ("." if prefix else "") + name
                raise ValueError(f"per_sample_grads: parameter '{full}' is a Python Parameter; per-example "
                                 "gradients are known for ember's layers (Linear, LayerNorm, Embedding and "
                                 "those built of them)")
    if not callable(losses):
        raise TypeError(f"per_sample_grads: losses must be callable, got {type(losses).__name__}")
    return dict(_C._nn._per_sample_grads(roots, batch_size, losses))


def per_sample_norms(grads):
    """The norm of each example's whole gradient (every parameter of the dict
    per_sample_grads gives): a float64 tensor [B]."""
    return _C._nn._per_sample_norms(list(grads.items()))


def clipped_mean(grads, max_norm):
    """Differentially private SGD's gradient without its noise: each example's gradient
    scaled down to norm max_norm when longer, then averaged: a dict name -> tensor."""
    return dict(_C._nn._clipped_mean(list(grads.items()), max_norm))


def gradient_noise(grads, prefix=""):
    """The gradient noise of the batch over the parameters whose names start with prefix
    (McCandlish et al. 2018): a dict with batch, parameters, mean_norm_sq (|m|^2), trace_cov
    (S), signal (|m|^2 - S/B), noise_scale (S / signal: B_simple) and snr (signal / (S/B))."""
    return _C._nn._gradient_noise(list(grads.items()), prefix)
