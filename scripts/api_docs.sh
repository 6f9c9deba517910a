#!/usr/bin/env bash
# Builds the API reference from the public headers' comments with Doxygen (Debian's
# doxygen, installed when missing) into OUT (default build/api): OUT/html/index.html.
# Lists what is undocumented in OUT/warnings.txt and fails when anything is.
#   scripts/api_docs.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh doxygen
out=$(realpath -m "${1:-build/api}")
mkdir -p "$out"
version=$(sed -n 's/^project(ember VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
if EMBER_VERSION=$version EMBER_API_OUT=$out doxygen docs/api/Doxyfile; then
  echo "api_docs: $out/html/index.html"
else
  echo "api_docs: $(wc -l <"$out/warnings.txt") warnings, in $out/warnings.txt" >&2
  exit 1
fi
