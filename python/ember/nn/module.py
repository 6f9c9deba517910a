"""nn.Module for Python, as torch.nn.Module: parameters, buffers and sub-modules are
registered when assigned as attributes, and named_parameters() gives dotted names in
registration order. A layer of ember's C++ library (layers.py) is a Module too, whose own
tensors and sub-layers stay in C++ and are listed by it, so a Python model mixing both has
one set of names - those of its state_dict."""

import collections

from .. import _C
from .. import graph as _graph
from ..grad_mode import no_grad

_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Parameter(_C.Tensor):
    """A tensor that a Module registers as a parameter when assigned to one of its
    attributes: a new leaf over data's memory, requiring grad unless told otherwise."""

    def __init__(self, data, requires_grad=True):
        super().__init__(data.detach())
        self.requires_grad_(requires_grad)


def _check_name(what, name):
    """A name a tensor or module can be registered under, as PyTorch's rules."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: the name must be a str, got {type(name).__name__}")
    if not name or "." in name:
        raise KeyError(f"{what}: the name must be non-empty and hold no '.', got {name!r}")


def _check_callable(what, hook):
    if not callable(hook):
        raise TypeError(f"{what}: the hook must be callable, got {type(hook).__name__}")


class RemovableHandle:
    """Removes a hook from the dict it was added to (harmless when done twice)."""

    _next_id = 0

    def __init__(self, hooks):
        self._hooks = hooks
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1

    def remove(self):
        self._hooks.pop(self.id, None)


class Module:
    """The base of every model, as torch.nn.Module: subclass, call super().__init__(),
    assign Parameters, Modules and buffers (register_buffer) as attributes, and define
    forward. Calling the module runs forward, with the hooks around it.

    Parameters are named by attribute, sub-modules' with dotted names, in registration
    order; a layer of ember's C++ library lists its own tensors under the same names.

    Example::

        >>> class Model(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.scale = nn.Parameter(ember.ones(3))
        ...         self.linear = nn.Linear(4, 3)
        ...
        ...     def forward(self, x):
        ...         return self.linear(x) * self.scale
        >>> model = Model()
        >>> [name for name, _ in model.named_parameters()]
        ['scale', 'linear.weight', 'linear.bias']
        >>> model(ember.randn(2, 4)).shape
        (2, 3)
    """

    def __init__(self):
        # set directly: __setattr__ below needs these to exist
        d = self.__dict__
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent"] = set()
        d["_modules"] = {}
        d["_forward_hooks"] = {}
        d["_forward_pre_hooks"] = {}
        d["training"] = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward")

    def __call__(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        scopes = _graph._active()
        if scopes is None:
            out = self.forward(*args, **kwargs)
        else:  # ember.graph_scopes: the ops are labelled with this module
            out = _graph._labelled_forward(scopes, self, args, kwargs)
        for hook in list(self._forward_hooks.values()):
            r = hook(self, args, out)
            if r is not None:  # as PyTorch: a hook's value replaces the output
                out = r
        return out

    # --- registration ---------------------------------------------------------------

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign to {name} before Module.__init__() is called")
        params, buffers, modules = self._parameters, self._buffers, self._modules
        if isinstance(value, Parameter):
            self._forget(name)
            params[name] = value
        elif isinstance(value, Module):
            self._forget(name)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign a {type(value).__name__} to parameter '{name}' "
                                "(an ember.nn.Parameter or None is required)")
            params[name] = None
        elif name in modules and value is None:
            modules[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, _C.Tensor):
                raise TypeError(f"cannot assign a {type(value).__name__} to buffer '{name}'")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        # reached only when normal lookup fails: the registered tensors and modules
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        if not self._forget(name):
            object.__delattr__(self, name)

    def _forget(self, name):
        found = False
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                found = True
        self._non_persistent.discard(name)
        self.__dict__.pop(name, None)
        return found

    def register_parameter(self, name, param):
        _check_name("register_parameter", name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: '{name}' must be an ember.nn.Parameter or None")
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor the module keeps but does not train; in state_dict when persistent."""
        _check_name("register_buffer", name)
        if tensor is not None and not isinstance(tensor, _C.Tensor):
            raise TypeError(f"register_buffer: '{name}' must be a Tensor or None, got {type(tensor).__name__}")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        _check_name("add_module", name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: '{name}' must be a Module or None, got {type(module).__name__}")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    # --- what the module holds --------------------------------------------------------

    def _own_parameters(self):
        """This module's own (name, parameter) pairs; C++ layers list all of theirs."""
        return [(n, p) for n, p in self._parameters.items() if p is not None]

    def _own_buffers(self, persistent_only=False):
        return [(n, b) for n, b in self._buffers.items()
                if b is not None and not (persistent_only and n in self._non_persistent)]

    def named_modules(self, memo=None, prefix=""):
        """Every module of the tree once, with its dotted name: the C++ layers' sub-layers
        included."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(memo, prefix + ("." if prefix else "") + name)

    def _tensor_owners(self, prefix=""):
        """The modules whose own tensors make up this one's: the Python-registered tree (a
        C++ layer lists its sub-layers' tensors itself)."""
        memo = set()

        def walk(mod, prefix):
            if id(mod) in memo:
                return
            memo.add(id(mod))
            yield prefix, mod
            for name, child in mod._modules.items():
                if child is not None:
                    yield from walk(child, prefix + ("." if prefix else "") + name)

        return walk(self, prefix)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_tensors(self, own, prefix, recurse):
        seen = set()  # a tensor registered twice (tied weights) is listed once, as PyTorch's
        modules = self._tensor_owners(prefix) if recurse else [(prefix, self)]
        for mod_prefix, mod in modules:
            for name, t in own(mod):
                if hash(t) in seen:  # a Tensor's hash is its identity
                    continue
                seen.add(hash(t))
                yield mod_prefix + ("." if mod_prefix else "") + name, t

    def named_parameters(self, prefix="", recurse=True):
        return self._named_tensors(lambda m: m._own_parameters(), prefix, recurse)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        return self._named_tensors(lambda m: m._own_buffers(), prefix, recurse)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # --- state ------------------------------------------------------------------------

    def _own_state(self):
        return self._own_parameters() + self._own_buffers(persistent_only=True)

    def state_dict(self, prefix="", keep_vars=False):
        """Parameters and persistent buffers by dotted name. The tensors share memory with
        the module's (detached unless keep_vars), as PyTorch's."""
        out = collections.OrderedDict()
        for mod_prefix, mod in self._tensor_owners(prefix):
            for name, t in mod._own_state():
                out[mod_prefix + ("." if mod_prefix else "") + name] = t if keep_vars else t.detach()
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies the values of state_dict into the module's tensors. With strict, missing
        and unexpected names are a RuntimeError listing them all, and nothing is changed;
        a shape or dtype mismatch is always an error, and nothing is changed."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        problems = []
        if strict:
            problems += [f'missing key "{k}"' for k in missing]
            problems += [f'unexpected key "{k}"' for k in unexpected]
        for k, v in state_dict.items():
            if k in own and (tuple(v.shape) != own[k].shape or v.dtype != own[k].dtype):
                problems.append(f'"{k}": shape {tuple(v.shape)} {v.dtype} in the state_dict, '
                                f"{own[k].shape} {own[k].dtype} in the module")
        if problems:
            raise RuntimeError(f"load_state_dict: {type(self).__name__}: " + "; ".join(problems))
        with no_grad():
            for k, v in state_dict.items():
                if k in own:
                    own[k].copy_(v)
        return _IncompatibleKeys(missing, unexpected)

    # --- modes and conversions --------------------------------------------------------

    def train(self, mode=True):
        for _, m in self._tensor_owners():
            m.__dict__["training"] = mode
            m._set_training(mode)
        return self

    def _set_training(self, mode):
        """What a C++ layer adds to train(): its own mode and its sub-layers'."""

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def to(self, *args, **kwargs):
        """Converts every parameter and floating buffer to dtype in place: each keeps its
        identity, so an optimizer built before goes on updating it. As PyTorch's, also
        to(device), to(device, dtype), to(tensor) (its dtype) and the keywords device, dtype
        and non_blocking; the one device is "cpu" (to("cpu") changes nothing)."""
        unexpected = sorted(set(kwargs) - {"device", "dtype", "non_blocking"})
        if unexpected:
            raise TypeError(f"to: got an unexpected keyword argument {unexpected[0]!r}")
        # the arguments read as Tensor.to reads them (devices checked): a dtype was given when
        # a float32 and a float64 tensor end up alike
        ends = [_C.zeros(0, dtype=d).to(*args, **kwargs).dtype for d in (_C.float32, _C.float64)]
        if ends[0] == ends[1]:
            for _, m in self._tensor_owners():
                m._to(ends[0])
        return self

    def _to(self, dtype):
        for _, t in self._own_parameters() + self._own_buffers():
            if t.is_floating_point():
                _C._nn.convert_in_place(t, dtype)

    def double(self):
        return self.to(_C.float64)

    def float(self):
        return self.to(_C.float32)

    def register_forward_hook(self, hook):
        """hook(module, args, output) after every forward; a value it returns replaces the output."""
        _check_callable("register_forward_hook", hook)
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        return handle

    def register_forward_pre_hook(self, hook):
        """hook(module, args) before every forward; a value it returns replaces the arguments."""
        _check_callable("register_forward_pre_hook", hook)
        handle = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[handle.id] = hook
        return handle

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"


class ModuleList(Module):
    """Modules in a list, registered as "0", "1", ..."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(ModuleList):
    """Applies its modules in order."""

    def __init__(self, *modules):
        super().__init__(modules)

    def forward(self, x):
        for m in self:
            x = m(x)
        return x
