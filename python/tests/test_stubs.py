"""The type stubs (python/ember/**/*.pyi, which editors and type checkers read) against the
package as it runs. Each module of ember has a stub, and the stub has exactly the module's
public names: a name not starting with "_", leaving out other packages' modules and what
the module imports for its own use (an import without `# noqa: F401`, flake8's mark of a
re-export). A function's, method's or class's parameters have the same names, in the same
order and kinds (positional, keyword-only, *args, **kwargs), as at runtime (an operator's
kinds only: Python passes its arguments by position): read with
inspect for Python code and from the signature pybind11 writes as the first line of
__doc__ (every line of an overloaded function's) for the extension. Every public function,
class and method in a stub has a docstring. The stubs are read with ast, never imported."""

import ast
import doctest
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import pytest

import ember

STUBS = Path(__file__).resolve().parent.parent / "ember"


def module_names():
    names = {"ember"}
    names.update(info.name for info in pkgutil.walk_packages(ember.__path__, "ember."))
    return sorted(names)


def stub_path(name):
    """python/ember/.../<name>.pyi, or .../__init__.pyi for a package."""
    parts = name.split(".")[1:]
    module = importlib.import_module(name)
    if hasattr(module, "__path__"):
        return STUBS.joinpath(*parts, "__init__.pyi")
    return STUBS.joinpath(*parts[:-1], parts[-1] + ".pyi")


_trees = {}


def stub_tree(name):
    if name not in _trees:
        path = stub_path(name)
        _trees[name] = ast.parse(path.read_text(), filename=str(path))
    return _trees[name]


def imported_module(name, node):
    """The absolute name of the module an ImportFrom in module `name` reads from."""
    if not node.level:
        return node.module
    is_package = hasattr(importlib.import_module(name), "__path__")
    base = name.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def stub_names(name):
    """Public name -> what binds it in the stub: a list of defs (overloads, a property's
    setter), a ClassDef, an assignment, or (module, name) for a re-export ("x as x")."""
    names = {}
    for node in stub_tree(name).body:
        if isinstance(node, ast.FunctionDef):
            names.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names[target.id] = node
        elif isinstance(node, ast.AnnAssign):
            names[node.target.id] = node
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname == alias.name:  # a re-export, as PEP 484 spells it in stubs
                    names[alias.name] = (imported_module(name, node), alias.name)
    return {n: v for n, v in names.items() if not n.startswith("_")}


def own_use_imports(module):
    """The names a Python module imports for its own use (no `# noqa: F401`)."""
    path = getattr(module, "__file__", "") or ""
    if not path.endswith(".py"):
        return set()
    source = Path(path).read_text()
    lines = source.splitlines()
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and "noqa: F401" not in lines[node.lineno - 1]:
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def runtime_names(module):
    private = own_use_imports(module)
    names = set()
    for n in dir(module):
        if n.startswith("_") or n in private:
            continue
        value = getattr(module, n)
        if isinstance(value, types.ModuleType) and not value.__name__.startswith("ember."):
            continue
        names.add(n)
    return names


# --- signatures, as lists of (name, kind) ------------------------------------------------

def _split_top_level(text):
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _parse_pybind(signature):
    """'f(a: int, *args, b: T = x) -> R' -> (("a", "pos"), ("*", "*"), ("b", "kw"))."""
    open_at = signature.index("(")
    depth = 0
    for i in range(open_at, len(signature)):
        depth += {"(": 1, ")": -1}.get(signature[i], 0)
        if depth == 0:
            break
    params, kind = [], "pos"
    for p in _split_top_level(signature[open_at + 1:i]):
        if p == "*":
            kind = "kw"
        elif p.startswith("**"):
            params.append(("**", "**"))
        elif p.startswith("*"):
            params.append(("*", "*"))
            kind = "kw"
        else:
            params.append((re.match(r"\w+", p).group(0), kind))
    return tuple(params)


def pybind_signatures(fn, name):
    """Every signature pybind11 wrote in fn.__doc__ (one per overload)."""
    lines = (fn.__doc__ or "").splitlines()
    assert lines and lines[0].startswith(name + "("), f"{name}: no pybind11 signature in its __doc__"
    if len(lines) > 1 and lines[1].strip() == "Overloaded function.":
        return {_parse_pybind(m.group(1)) for m in (re.match(r"^\d+\. (.*)$", l) for l in lines) if m}
    return {_parse_pybind(lines[0])}


_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "pos", inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
    inspect.Parameter.KEYWORD_ONLY: "kw",
}


def python_signature(fn):
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind == inspect.Parameter.VAR_POSITIONAL:
            params.append(("*", "*"))
        elif p.kind == inspect.Parameter.VAR_KEYWORD:
            params.append(("**", "**"))
        else:
            params.append((p.name, _KINDS[p.kind]))
    return tuple(params)


def stub_signature(node, drop_first=False):
    a = node.args
    params = [(x.arg, "pos") for x in a.posonlyargs + a.args]
    if drop_first:
        params = params[1:]
    if a.vararg:
        params.append(("*", "*"))
    params += [(x.arg, "kw") for x in a.kwonlyargs]
    if a.kwarg:
        params.append(("**", "**"))
    return tuple(params)


def decorators(node):
    return {d.id if isinstance(d, ast.Name) else d.attr for d in node.decorator_list}


def runtime_signatures(owner, name, value):
    """The signatures of a runtime function or method `value`, called `name` in owner."""
    if isinstance(value, types.BuiltinFunctionType) or type(value).__name__ == "instancemethod":
        return pybind_signatures(value, name)
    if inspect.isclass(owner) and type(inspect.getattr_static(owner, name)).__name__ == "instancemethod":
        return pybind_signatures(value, name)
    signature = python_signature(value)
    # a Module or schedule over a C++ class takes its arguments: the C++ signature is the one
    if signature == (("self", "pos"), ("*", "*"), ("**", "**")) and getattr(owner, "_cpp", None) is not None:
        return runtime_signatures(owner._cpp, name, getattr(owner._cpp, name))
    return {signature}


def check_function(where, name, defs, value):
    drop_first = any("classmethod" in decorators(d) for d in defs)
    stub = {stub_signature(d, drop_first) for d in defs if "setter" not in decorators(d)}
    runtime = runtime_signatures(where, name, value)
    if name.startswith("__") and name != "__init__":  # operators: Python passes their arguments by position
        stub, runtime = ({tuple(kind for _, kind in s) for s in sigs} for sigs in (stub, runtime))
    assert stub == runtime, f"{name}: the stub's parameters {sorted(stub)} differ from the runtime's {sorted(runtime)}"


# --- classes -------------------------------------------------------------------------------

def resolve_class(module_name, class_name):
    """The ClassDef a stub means by class_name: defined there, or imported from another stub."""
    for node in stub_tree(module_name).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return module_name, node
    for node in stub_tree(module_name).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == class_name:
                    source = imported_module(module_name, node)
                    if source.split(".")[0] != "ember":
                        return None  # typing's NamedTuple, say: no stub of ours to read
                    return resolve_class(source, alias.name)
    return None


def stub_members(module_name, node):
    """Member name -> defs, for the class and its stub bases (the class's own first)."""
    members = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            members.setdefault(item.name, []).append(item)
    for base in node.bases:
        if isinstance(base, ast.Name):
            found = resolve_class(module_name, base.id)
            if found:
                for n, defs in stub_members(*found).items():
                    members.setdefault(n, defs)
    return members


def check_class(module_name, node, cls):
    own = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            own.setdefault(item.name, []).append(item)
    for name, defs in own.items():
        if name == "__getattr__":  # tells type checkers that any attribute may be set
            continue
        assert hasattr(cls, name), f"{cls.__name__}.{name} is in the stub but not at runtime"
        if {"property", "setter"} & set().union(*(decorators(d) for d in defs)):
            assert isinstance(inspect.getattr_static(cls, name), property), \
                f"{cls.__name__}.{name} is a property in the stub but not at runtime"
            continue
        check_function(cls, name, defs, getattr(cls, name))
    everything = stub_members(module_name, node)
    for name, value in vars(cls).items():
        if name.startswith("_") or not (callable(value) or isinstance(value, (property, staticmethod, classmethod))):
            continue
        assert name in everything, f"{cls.__name__}.{name} exists at runtime but not in the stub"


def docstring_missing(node):
    return not (node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                and isinstance(node.body[0].value.value, str))


# --- the tests -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", module_names())
def test_every_module_has_a_stub_with_its_public_names(name):
    assert stub_path(name).exists(), f"{name} has no stub ({stub_path(name)})"
    module = importlib.import_module(name)
    stub, runtime = set(stub_names(name)), runtime_names(module)
    assert not runtime - stub, f"{name}: not in the stub: {sorted(runtime - stub)}"
    assert not stub - runtime, f"{name}: in the stub but not at runtime: {sorted(stub - runtime)}"


@pytest.mark.parametrize("name", module_names())
def test_stub_signatures_match_the_runtime(name):
    module = importlib.import_module(name)
    for n, node in stub_names(name).items():
        value = getattr(module, n)
        if isinstance(node, tuple):  # a re-export: the same object as in the module named
            source, original = node
            assert value is getattr(importlib.import_module(source), original), f"{name}.{n} is not {source}.{original}"
        elif isinstance(node, list):
            check_function(module, n, node, value)
        elif isinstance(node, ast.ClassDef):
            assert inspect.isclass(value), f"{name}.{n} is a class in the stub, a {type(value).__name__} at runtime"
            check_class(name, node, value)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):  # an alias
            assert value is getattr(module, node.value.id), f"{name}.{n} is not {node.value.id}"
        else:
            assert not callable(value) or isinstance(value, ember.dtype), \
                f"{name}.{n} is a variable in the stub, a {type(value).__name__} at runtime"


@pytest.mark.parametrize("name", module_names())
def test_every_public_def_in_the_stubs_has_a_docstring(name):
    missing = []

    def visit(nodes, prefix):
        overloads = {}  # an overloaded function (or a property and its setter) needs one docstring
        for node in nodes:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                if docstring_missing(node):
                    missing.append(prefix + node.name)
                visit(node.body, prefix + node.name + ".")
            elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                overloads.setdefault(node.name, []).append(not docstring_missing(node))
        missing.extend(prefix + n for n, documented in overloads.items() if not any(documented))

    visit(stub_tree(name).body, "")
    assert not missing, f"{name}: no docstring for {missing}"


def test_every_stub_belongs_to_a_module():
    modules = {stub_path(n) for n in module_names()}
    extra = [str(p.relative_to(STUBS)) for p in STUBS.rglob("*.pyi") if p not in modules]
    assert not extra, f"stubs of no module: {extra}"
    assert (STUBS / "py.typed").exists()


def test_the_checks_catch_drift():
    # a stub that renames a parameter, or misses a function, fails
    tree = ast.parse("def softmax(input, axis): ...")
    with pytest.raises(AssertionError, match="softmax"):
        check_function(ember, "softmax", tree.body, ember.softmax)
    tree = ast.parse("def linear(input, weight, b=None): ...")
    with pytest.raises(AssertionError, match="linear"):
        check_function(ember.nn.functional, "linear", tree.body, ember.nn.functional.linear)
    assert _parse_pybind("add(self: T, other: float = 1.0, *, out: Optional[T] = None) -> T") == (
        ("self", "pos"), ("other", "pos"), ("out", "kw"))


@pytest.mark.parametrize("cls", [ember.nn.Linear, ember.nn.Embedding, ember.nn.Dropout, ember.nn.LayerNorm,
                                 ember.nn.MultiheadAttention, ember.nn.TransformerEncoderLayer,
                                 ember.nn.TransformerDecoderLayer, ember.nn.Transformer],
                         ids=lambda c: c.__name__)
def test_layer_docstrings_read_as_pytorchs_and_their_examples_run(cls):
    doc = inspect.getdoc(cls)
    for section in ("Args:", "Shape:", "Example:"):
        assert section in doc, f"{cls.__name__}'s docstring has no {section} section"
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(cls, cls.__name__, globs={"ember": ember, "nn": ember.nn}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{cls.__name__}: {result}"


def test_module_docstring_examples_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(ember.nn.module, "ember.nn.module", globs={"ember": ember, "nn": ember.nn}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, result
