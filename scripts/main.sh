#!/usr/bin/env bash
# The main job: install what is missing, build (Release) and train the example model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
./build/examples/fit_sine "$@"
