#!/usr/bin/env bash
# Builds the libFuzzer targets (the checkpoint loader, the pair-file reader, NumPy's formats) with clang (AddressSanitizer + UndefinedBehaviorSanitizer)
# and runs each for SECONDS (default 60) from a fresh seed corpus. Fails on any crash,
# hang (an input taking over 10 s), leak or sanitizer report. The mutations come from a
# fixed seed (FUZZ_SEED, default 1), so a run repeats itself on the same machine.
#   scripts/fuzz.sh [SECONDS]
# FUZZ_BUILD=DIR uses a build directory configured already with EMBER_FUZZ on (the test
# command's sanitizer build, which builds the tests and the fuzz targets together); without
# it, build-fuzz is configured for the fuzz targets alone.
set -euo pipefail
[ -z "${FUZZ_BUILD:-}" ] || FUZZ_BUILD=$(realpath -m -- "$FUZZ_BUILD")  # (relative to the caller's directory)
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${FUZZ_BUILD:-build-fuzz}
if [ -n "${FUZZ_BUILD:-}" ]; then
  # any value CMake takes for true (ON, 1, YES, TRUE, Y, in any case), and this source tree's
  grep -qsiE "^EMBER_FUZZ:BOOL=(on|yes|true|y|[1-9][0-9]*)$" "$build/CMakeCache.txt" &&
    grep -qsx "CMAKE_HOME_DIRECTORY:INTERNAL=$(pwd -P)" "$build/CMakeCache.txt" ||
    { echo "fuzz.sh: FUZZ_BUILD=$build is not a build directory of $(pwd -P) configured with -DEMBER_FUZZ=ON" >&2; exit 2; }
else
  generator=$([ -f "$build/CMakeCache.txt" ] || ! command -v ninja >/dev/null || echo "-GNinja")  # as scripts/test.sh
  CC=clang CXX=clang++ cmake -S . -B "$build" $generator -DCMAKE_BUILD_TYPE=Debug -DEMBER_FUZZ=ON \
    -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_TOOLS=OFF -DEMBER_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target fuzz_checkpoint make_fuzz_seeds fuzz_pairs fuzz_npy

run() {  # name, seed directory, extra libFuzzer flags...
  local name=$1 seeds=$2 corpus="$build/corpus-$1" log="$build/$1.log"
  shift 2
  rm -rf "$corpus" && mkdir -p "$corpus"
  echo "== fuzz $name for ${seconds}s"
  if "$build/tests/fuzz/$name" "$corpus" "$seeds" -max_total_time="$seconds" -seed="${FUZZ_SEED:-1}" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/$name-" "$@" >"$log" 2>&1; then
    grep -E "^(Done|stat::)" "$log"
  else
    echo "$name FAILED; the input is in $build/$name-*; its report:"
    grep -v -E "^#[0-9]+" "$log" | tail -n 80
    return 1
  fi
}

seeds="$build/seeds-checkpoint"
rm -rf "$seeds" && mkdir -p "$seeds"
"$build/tests/fuzz/make_fuzz_seeds" "$seeds"
run fuzz_checkpoint "$seeds"

seeds="$build/seeds-pairs"
rm -rf "$seeds" && mkdir -p "$seeds"
for split in train valid test; do head -n 16 "data/dates/$split.tsv" >"$seeds/$split.tsv"; done
head -n 4 data/dates/train.tsv | sed 's/$/\r/' >"$seeds/crlf.tsv"
run fuzz_pairs "$seeds" -max_len=4096

seeds="$build/seeds-npy"
rm -rf "$seeds" && mkdir -p "$seeds"
"$build/tests/fuzz/make_fuzz_seeds" "$seeds" npy
run fuzz_npy "$seeds" -max_len=4096
