"""pip's entry to the Python package: `pip install --no-build-isolation .` (see
docs/python-install.md). The metadata is in pyproject.toml; this builds ember._C with the
project's own CMake build (the target ember_python) and puts it next to the pure-Python
files and stubs of python/ember/ in the wheel.

EMBER_BUILD_DIR=<dir> builds in that CMake build directory (configured before, or
configured here), so an existing build is reused; without it, the build is build/pip,
configured in Release without the tests, examples, tools and benchmarks. Both the CMake
build and setuptools' own files go under it, so the source tree is not written to."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.path.abspath(os.environ.get("EMBER_BUILD_DIR") or os.path.join(ROOT, "build", "pip"))


def project_version():
    """project(ember VERSION x.y.z) in CMakeLists.txt: ember.__version__ says the same."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(ember VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    """Configures (when needed) and builds ember_python, then copies ember/_C*.so."""

    def build_extension(self, ext):
        if not os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")):
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", BUILD_DIR, "-DCMAKE_BUILD_TYPE=Release",
                "-DEMBER_BUILD_TESTS=OFF", "-DEMBER_BUILD_EXAMPLES=OFF", "-DEMBER_BUILD_TOOLS=OFF",
                "-DEMBER_BUILD_BENCH=OFF", f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", BUILD_DIR, "--target", "ember_python", "-j", jobs])
        name = "_C" + sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(BUILD_DIR, "python", "ember", name)
        if not os.path.exists(built):
            raise RuntimeError(f"{built} was not built: the build in {BUILD_DIR} is for another Python "
                               f"than {sys.executable}, or skipped the Python module (see its CMake output)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        shutil.copymode(built, target)


setup(
    version=project_version(),
    package_dir={"": "python"},
    packages=["ember", "ember.autograd", "ember.nn"],
    package_data={"": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("ember._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join(BUILD_DIR, "setuptools")},
             "egg_info": {"egg_base": BUILD_DIR}},
    zip_safe=False,
)
