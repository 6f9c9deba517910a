#!/usr/bin/env bash
# What watching attention costs: the translator's training run with and without --watch
# (--watch-every 50, the probe batch of 64 validation pairs; numbers written at every
# checkpoint, figures at the end), in one invocation, ROUNDS times. This shared machine's
# speed swings by 30% from one minute to the next, more than the watch costs, so the two
# runs of a round go side by side, one thread each, one per core (the cores swap each
# round): every swing falls on both alike. Two figures:
#   - the wall time of the whole run: the median of each round's ratio, watched over
#     plain;
#   - the run's own count: the seconds spent measuring and writing the watch's files, as a
#     share of the run's training time.
# Prints a table and writes it as JSON.
#
#   bench/watch.sh [JSON_FILE]            (default bench/results/watch.json)
#
# EMBER_WATCH_BENCH_STEPS (default 600) and EMBER_WATCH_BENCH_ROUNDS (default 6) change
# the run. Needs the Release build of translate (cmake --build build --target translate)
# and two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
json=${1:-bench/results/watch.json}
translate=./build/examples/translate/translate
[ -x "$translate" ] || { echo "build the translator first: cmake --build build --target translate" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "bench/watch.sh runs two trainings side by side: it needs two cores" >&2; exit 2; }
mkdir -p "$(dirname "$json")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset OMP_WAIT_POLICY
steps=${EMBER_WATCH_BENCH_STEPS:-600}
rounds=${EMBER_WATCH_BENCH_ROUNDS:-6}
common=(--steps "$steps" --eval-every 1000000 --save-every 200 --log-every 1000 --target-acc 2 --threads 1)

seconds() { date +%s.%N; }
run() {  # run MODE CORE: the wall seconds into $work/MODE.seconds
  rm -rf "$work/$1"
  local extra=()
  [ "$1" = watched ] && extra=(--watch --watch-every 50)
  local t0
  t0=$(seconds)
  taskset -c "$2" "$translate" train --out "$work/$1" "${common[@]}" "${extra[@]}" >"$work/$1.log"
  awk -v a="$t0" -v b="$(seconds)" 'BEGIN { printf "%.3f", b - a }' >"$work/$1.seconds"
}
plain=() watched=() ratios=() own=()
for r in $(seq "$rounds"); do
  cores=(0 1)
  [ $((r % 2)) = 0 ] && cores=(1 0)
  run plain "${cores[0]}" &
  run watched "${cores[1]}" &
  wait
  p=$(cat "$work/plain.seconds") w=$(cat "$work/watched.seconds")
  plain+=("$p") watched+=("$w")
  ratios+=("$(awk -v a="$w" -v b="$p" 'BEGIN { printf "%.4f", a / b }')")
  own+=("$(sed -n 's/^watch: .* s with the files (\([0-9.]*\)% of training).*/\1/p' "$work/watched.log")")
  echo "round $r: without $p s (core ${cores[0]}), with $w s (core ${cores[1]}): x${ratios[-1]}; the run's own count ${own[-1]}%"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
p=$(median "${plain[@]}") w=$(median "${watched[@]}") ratio=$(median "${ratios[@]}") share=$(median "${own[@]}")
lo=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1) hi=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
cat <<EOF2

translate train, $steps steps, 1 thread each, side by side, $rounds rounds
  without --watch (median):                  $p s
  with --watch --watch-every 50 (median):    $w s
  each round's ratio, median (lowest, highest): x$ratio (x$lo, x$hi)
  the run's own count, measuring and writing:   $share% of training (median)
EOF2
cat >"$json" <<EOF2
{
  "date": "$(date +%Y-%m-%d)",
  "machine": "$(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)",
  "steps": $steps,
  "threads": 1,
  "rounds": $rounds,
  "seconds_without_watch": $p,
  "seconds_with_watch": $w,
  "ratio": $ratio,
  "ratio_lowest": $lo,
  "ratio_highest": $hi,
  "own_count_percent": $share
}
EOF2
echo "wrote $json"
