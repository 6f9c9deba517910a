#!/usr/bin/env bash
# What watching attention costs: the translator's training run with and without --watch
# (--watch-every 50, the probe batch of 64 validation pairs; files written at every
# checkpoint and at the end), in one invocation, alternating, each ROUNDS times. The wall
# time of the whole run is compared (median against median), and the time the run itself
# reports spent measuring. Prints a table and writes it as JSON.
#
#   bench/watch.sh [JSON_FILE]            (default bench/results/watch.json)
#
# EMBER_WATCH_BENCH_STEPS (default 600) and EMBER_WATCH_BENCH_ROUNDS (default 3) change
# the run. Needs the Release build of translate (cmake --build build --target translate).
set -euo pipefail
cd "$(dirname "$0")/.."
json=${1:-bench/results/watch.json}
translate=./build/examples/translate/translate
[ -x "$translate" ] || { echo "build the translator first: cmake --build build --target translate" >&2; exit 2; }
mkdir -p "$(dirname "$json")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset OMP_WAIT_POLICY
steps=${EMBER_WATCH_BENCH_STEPS:-600}
rounds=${EMBER_WATCH_BENCH_ROUNDS:-3}
common=(--steps "$steps" --eval-every 1000000 --save-every 200 --log-every 1000 --target-acc 2)

seconds() { date +%s.%N; }
plain=() watched=() measuring=()
for r in $(seq "$rounds"); do
  for mode in plain watched; do
    rm -rf "$work/out"
    extra=()
    [ "$mode" = watched ] && extra=(--watch --watch-every 50)
    t0=$(seconds)
    "$translate" train --out "$work/out" "${common[@]}" "${extra[@]}" >"$work/$mode.log"
    t=$(awk -v a="$t0" -v b="$(seconds)" 'BEGIN { printf "%.3f", b - a }')
    if [ "$mode" = plain ]; then
      plain+=("$t")
    else
      watched+=("$t")
      measuring+=("$(sed -n 's/^watch: [0-9]* measurements .* in \([0-9.]*\) s .*/\1/p' "$work/$mode.log")")
    fi
    echo "round $r, $mode: $t s"
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
p=$(median "${plain[@]}") w=$(median "${watched[@]}") m=$(median "${measuring[@]}")
ratio=$(awk -v a="$w" -v b="$p" 'BEGIN { printf "%.4f", a / b }')
threads=$(sed -n 's/.* \([0-9]*\) thread(s).*/\1/p' "$work/plain.log" | head -1)
cat <<EOF

translate train, $steps steps, $threads thread(s), median of $rounds runs each
  without --watch:                  $p s
  with --watch --watch-every 50:    $w s   (x$ratio)
  of which measuring (the run's own count): $m s
EOF
cat >"$json" <<EOF
{
  "date": "$(date +%Y-%m-%d)",
  "machine": "$(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)",
  "steps": $steps,
  "threads": $threads,
  "rounds": $rounds,
  "seconds_without_watch": $p,
  "seconds_with_watch": $w,
  "ratio": $ratio,
  "seconds_measuring": $m
}
EOF
echo "wrote $json"
