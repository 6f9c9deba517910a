"""Run by the install tests (python/CMakeLists.txt) in a fresh interpreter whose only way
to ember is the installed copy: `python check_installed.py <dir> [pip]` fails unless ember,
with its extension, stubs and py.typed, is imported from <dir> and computes a gradient;
with pip, unless the installed distribution's version is ember.__version__."""

import importlib.metadata
import os
import sys

import ember

where = os.path.realpath(sys.argv[1])
package = os.path.dirname(os.path.realpath(ember.__file__))
assert package.startswith(where + os.sep), f"ember was imported from {package}, not from under {where}"
assert os.path.realpath(ember._C.__file__).startswith(package + os.sep), ember._C.__file__
for name in ("py.typed", "_C.pyi", "__init__.pyi", os.path.join("nn", "__init__.pyi")):
    assert os.path.exists(os.path.join(package, name)), f"{name} is not installed in {package}"

if sys.argv[2:] == ["pip"]:
    assert importlib.metadata.version("ember") == ember.__version__, importlib.metadata.version("ember")

x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
loss = (x @ x).sum()
loss.backward()
# d/dX sum(X X) = 1 X^T + X^T 1: grad[i][j] = (row j of X summed) + (column i summed)
assert loss.item() == 54.0, loss.item()
assert x.grad.tolist() == [[7.0, 11.0], [9.0, 13.0]], x.grad.tolist()
assert isinstance(ember.nn.Linear(2, 3)(x), ember.Tensor)
print(f"ember {ember.__version__} from {package}")
