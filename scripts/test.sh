#!/usr/bin/env bash
# The test command: install what is missing, then build and run the whole suite twice -
# Release, and Debug with AddressSanitizer + UndefinedBehaviorSanitizer under clang (the libraries and
# the Catch2 suite: the examples, tools and benchmarks, the Python module's pytest suite,
# the API reference and the tests that run them, are the Release build's) - then fuzz the checkpoint loader, the data-file reader and the NumPy-format
# reader for 30 seconds each (clang's libFuzzer; FUZZ_SECONDS=N for longer). Fails when any test fails or a fuzzer finds a
# crash, hang or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh clang libclang-rt-14-dev libomp-dev python3-numpy python3-torch python3-h5py doxygen \
  pybind11-dev libdlpack-dev python3-dev python3-pytest python3-nbclient python3-ipykernel python3-matplotlib \
  python3-setuptools python3-pip python3-venv graphviz libopenblas0-pthread ninja-build
jobs=$(nproc)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# A new build directory is generated for Ninja, which starts a target's compiles before the
# libraries it links are archived (make waits for them); one that exists keeps its generator.
generator() { [ -f "$1/CMakeCache.txt" ] || ! command -v ninja >/dev/null || echo "-GNinja"; }

echo "== Release build and tests"
cmake -S . -B build $(generator build) -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== Debug + AddressSanitizer + UndefinedBehaviorSanitizer build (clang) and tests"
# clang: its UBSan checks float-to-integer conversions too, and it compiles the test files
# faster (test_gradcheck_ops here in 12 s, against gcc's 23 s). The fuzz targets are built
# here as well (-DEMBER_FUZZ=ON): one compilation of the libraries serves both. Shared
# libraries: the tests link in about half the time.
CC=clang CXX=clang++ cmake -S . -B build-sanitize $(generator build-sanitize) -DCMAKE_BUILD_TYPE=Debug \
  -DEMBER_SANITIZE=ON -DEMBER_FUZZ=ON -DBUILD_SHARED_LIBS=ON \
  -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_TOOLS=OFF -DEMBER_BUILD_BENCH=OFF
cmake --build build-sanitize -j"$jobs"
ctest --test-dir build-sanitize --output-on-failure -j"$jobs"

echo "== Fuzzing (libFuzzer, ASan + UBSan)"
FUZZ_BUILD=build-sanitize bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
