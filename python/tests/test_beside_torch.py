"""ember beside PyTorch and NumPy in one process, imported in either order.

Each keeps its own OpenBLAS: ember's module carries the OpenMP build privately, while
PyTorch and NumPy load the system's libblas.so.3, here Debian's pthread build (loaded just
before them: the build that, sharing one libopenblas.so.0 with ember's, hung PyTorch's first
matrix product when ember was imported first). Each order runs in a fresh process, with the
thread counts left to the libraries (no OMP_NUM_THREADS), under a timeout."""

import os
import platform

import pytest

PTHREAD_DIR = f"/usr/lib/{platform.machine()}-linux-gnu/openblas-pthread"
TIMEOUT = 120  # seconds; the whole script takes about 2

SCRIPT = """
import ctypes


def load(name):
    if name != "ember":  # PyTorch and NumPy take the libblas.so.3 already loaded
        ctypes.CDLL("{blas}", mode=ctypes.RTLD_GLOBAL)
    __import__(name)


load("{first}")
load("{second}")
import numpy as np
import ember
import torch

a = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))
by_torch = (a @ a).numpy()
by_ember = (ember.from_numpy(a.numpy()) @ ember.from_numpy(a.numpy())).numpy()
n = a.numpy().astype(np.float64)
by_numpy = n @ n
assert np.allclose(by_ember, by_torch, rtol=1e-4, atol=1e-3)
assert np.allclose(by_ember, by_numpy, rtol=1e-4, atol=1e-3)
# ember's own threads still give the same bits on 1 and 2
ember.set_num_threads(1)
one = (ember.from_numpy(a.numpy()) @ ember.from_numpy(a.numpy())).numpy()
assert (one == by_ember).all()
print("ok")
"""


@pytest.mark.parametrize("first,second", [("ember", "torch"), ("torch", "ember"), ("ember", "numpy")])
def test_imported_in_either_order_nothing_hangs(first, second, run_python):
    if not os.path.isdir(PTHREAD_DIR):
        pytest.skip(f"no {PTHREAD_DIR} (libopenblas0-pthread, which scripts/test.sh installs)")
    done = run_python(SCRIPT.format(first=first, second=second, blas=PTHREAD_DIR + "/libblas.so.3"), TIMEOUT,
                      omp=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
