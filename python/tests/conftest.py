"""What several test files share: a script run by a fresh interpreter."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import ember

# the directory holding this suite's ember package, wherever a script runs from
PACKAGE_PARENT = str(pathlib.Path(ember.__file__).resolve().parents[1])


@pytest.fixture
def run_python():
    """run_python(code, timeout=120, cwd=None, omp=True) runs code (dedented) in a fresh
    interpreter that imports this suite's ember and returns the CompletedProcess, output
    captured as text. omp=False leaves the OMP_ variables out of its environment, so that
    the libraries choose their own thread counts. A script still running after timeout
    seconds fails the test, saying so, instead of hanging the suite."""

    def run(code, timeout=120, cwd=None, omp=True):
        env = {k: v for k, v in os.environ.items() if omp or not k.startswith("OMP_")}
        env["PYTHONPATH"] = os.pathsep.join([PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")])
        try:
            return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"a script did not finish in {timeout} s:\n{textwrap.dedent(code)}")

    return run
