#!/usr/bin/env bash
# The seeds' experiment in real training: the translator with its attention scores scaled
# by 1/sqrt(d_k) (--score-scale 1) and unscaled (--score-scale sqrt(d_k)), at the default
# size (d_model 128, 4 heads: d_k 32) and at d_model 512 with 8 heads (d_k 64), same seed,
# every head watched. Each run stops at 99% validation exact match (or --steps).
#
#   examples/translate/score_scale.sh TRANSLATE WATCH_PLOT OUT_DIR [THREADS] [STEPS]
#
# Writes OUT_DIR/<run>/ (the run's output, checkpoint, watch files and figures),
# OUT_DIR/compare_*.png (the runs side by side) and OUT_DIR/summary.md.
set -euo pipefail
translate=$1 watch_plot=$2 out=$3 threads=${4:-1} steps=${5:-4000}
mkdir -p "$out"
common=(--steps "$steps" --target-acc 0.99 --eval-every 100 --save-every 100000 --log-every 100 --seed 1
        --watch --watch-every 50 --threads "$threads")
# name d_model heads score_scale
runs=("d128_scaled 128 4 1" "d128_unscaled 128 4 5.656854249492381"
      "d512_scaled 512 8 1" "d512_unscaled 512 8 8")
[ -n "${SCORE_SCALE_RUNS:-}" ] && read -r -a only <<<"$SCORE_SCALE_RUNS"
for r in "${runs[@]}"; do
  read -r name d h s <<<"$r"
  if [ -n "${only:-}" ] && [[ ! " ${only[*]} " =~ " $name " ]]; then continue; fi
  rm -rf "${out:?}/$name"
  echo "== $name: d_model $d, $h heads, --score-scale $s"
  "$translate" train "${common[@]}" --d-model "$d" --heads "$h" --score-scale "$s" --out "$out/$name" \
    >"$out/$name.log" 2>&1 || { echo "$name failed: see $out/$name.log"; tail -5 "$out/$name.log"; }
  grep -E "^step [0-9]+: validation|^done:" "$out/$name.log" | tail -2
done

# the first evaluation at 99% or more: its step and seconds of training
{
  echo "| run | d_model, heads (d_k) | --score-scale | steps to 99% | training time to 99% | best exact match |"
  echo "|---|---|---|---|---|---|"
  for r in "${runs[@]}"; do
    read -r name d h s <<<"$r"
    [ -f "$out/$name.log" ] || continue
    awk -v name="$name" -v d="$d" -v h="$h" -v s="$s" '
      /^step [0-9]+: validation exact match/ {
        step = $2; sub(":", "", step); acc = $6; sub("%,", "", acc); sub("%", "", acc)
        t = $0; sub(/.*\(/, "", t); sub(/ s of training\).*/, "", t)
        if (acc + 0 > best + 0) best = acc
        if (!hit && acc + 0 >= 99) { hit = 1; at = step; secs = t }
      }
      END {
        printf "| %s | %d, %d (%d) | %s | %s | %s | %.2f%% |\n", name, d, h, d / h, s,
               hit ? at : "not reached", hit ? secs " s" : "-", best
      }' "$out/$name.log"
  done
} >"$out/summary.md"
cat "$out/summary.md"
files=() labels=()
for r in "${runs[@]}"; do
  read -r name _ <<<"$r"
  [ -f "$out/$name/watch.h5" ] && files+=("$out/$name/watch.h5") && labels+=(--label "$name")
done
[ ${#files[@]} -gt 0 ] && "$watch_plot" "${files[@]}" "${labels[@]}" --compare "$out/compare" | tee -a "$out/summary.md"
