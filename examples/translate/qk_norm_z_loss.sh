#!/usr/bin/env bash
# Attention-logit growth and its cures in real training: the translator at the default size
# (d_model 128, 4 heads) as it is, with --qk-norm (queries and keys layer-normalised per
# head), with --z-loss 1e-4 (the output logits' log Z kept near 0), and with both, at the
# default peak learning rate and at a high one, same seed, every head watched (the largest
# attention logit per head: the watch's max_logit). Each run stops at 99% validation exact
# match (or --steps, or a loss that is not finite).
#
#   examples/translate/qk_norm_z_loss.sh TRANSLATE WATCH_PLOT OUT_DIR [THREADS] [STEPS] [HIGH_LR]
#
# Writes OUT_DIR/<run>/ (the run's output, checkpoint, watch files and figures),
# OUT_DIR/compare_<lr>_*.png (the runs of one learning rate side by side) and
# OUT_DIR/summary.md. QK_NORM_Z_LOSS_RUNS="base_hi qk_hi" runs only those.
set -euo pipefail
translate=$1 watch_plot=$2 out=$3 threads=${4:-1} steps=${5:-1500} high_lr=${6:-1e-2}
mkdir -p "$out"
common=(--steps "$steps" --target-acc 0.99 --eval-every 100 --save-every 100000 --log-every 100 --seed 1
        --watch --watch-every 50 --threads "$threads")
default_lr=3e-3  # translate train's default --lr
# name lr options...
runs=("base $default_lr" "qk $default_lr --qk-norm" "z $default_lr --z-loss 1e-4" "qk_z $default_lr --qk-norm --z-loss 1e-4"
      "base_hi $high_lr" "qk_hi $high_lr --qk-norm" "z_hi $high_lr --z-loss 1e-4"
      "qk_z_hi $high_lr --qk-norm --z-loss 1e-4")
[ -n "${QK_NORM_Z_LOSS_RUNS:-}" ] && read -r -a only <<<"$QK_NORM_Z_LOSS_RUNS"
for r in "${runs[@]}"; do
  read -r name lr opts <<<"$r"
  if [ -n "${only:-}" ] && [[ ! " ${only[*]} " =~ " $name " ]]; then continue; fi
  rm -rf "${out:?}/$name"
  echo "== $name: --lr $lr $opts"
  # shellcheck disable=SC2086  # opts are words
  "$translate" train "${common[@]}" --lr "$lr" $opts --out "$out/$name" >"$out/$name.log" 2>&1 ||
    { echo "$name stopped: see $out/$name.log"; tail -2 "$out/$name.log"; }
  grep -E "^step [0-9]+: validation|^done:" "$out/$name.log" | tail -2
done

# per run: the first evaluation at 99% or more, the best exact match, and per module the
# largest attention logit over layers and heads at the last measurement and over the run
{
  echo "| run | --lr | options | steps to 99% | best exact match | last step | max logit, last (max over the run): encoder self | decoder self | decoder cross |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for r in "${runs[@]}"; do
    read -r name lr opts <<<"$r"
    [ -f "$out/$name.log" ] || continue
    logits=$(awk -F, '
      NR == 1 { for (i = 1; i <= NF; i++) if ($i == "max_logit") c = i; next }
      $c != "nan" && $c != "" {
        if (!($2 in top) || $c + 0 > top[$2]) top[$2] = $c + 0
        if ($1 + 0 > last) { last = $1 + 0; delete now }
        if ($1 + 0 == last && (!($2 in now) || $c + 0 > now[$2])) now[$2] = $c + 0
      }
      END {
        n = split("encoder_self decoder_self decoder_cross", m, " ")
        for (i = 1; i <= n; i++) printf " %.1f (%.1f) |", now[m[i]], top[m[i]]
      }' "$out/$name/watch.csv" 2>/dev/null || echo " - | - | - |")
    awk -v name="$name" -v lr="$lr" -v opts="${opts:--}" -v logits="$logits" '
      /^step [0-9]+: validation exact match/ {
        step = $2; sub(":", "", step); acc = $6; sub("%,", "", acc); sub("%", "", acc)
        if (acc + 0 > best + 0) best = acc
        if (!hit && acc + 0 >= 99) { hit = 1; at = step }
      }
      /^step [0-9]+/ { s = $2; sub(":", "", s); if (s + 0 > last) last = s + 0 }
      /the loss is (NaN|infinite)/ { stopped = " (loss not finite)" }
      END {
        printf "| %s | %s | %s | %s | %.2f%% | %d%s |%s\n", name, lr, opts, hit ? at : "not reached", best, last,
               stopped, logits
      }' "$out/$name.log"
  done
} >"$out/summary.md"
cat "$out/summary.md"
for tag in default high; do
  files=() labels=()
  for r in "${runs[@]}"; do
    read -r name lr _ <<<"$r"
    [ "$tag" = default ] && [ "$lr" != "$default_lr" ] && continue
    [ "$tag" = high ] && [ "$lr" = "$default_lr" ] && continue
    [ -f "$out/$name/watch.h5" ] && files+=("$out/$name/watch.h5") && labels+=(--label "$name")
  done
  [ ${#files[@]} -gt 0 ] && "$watch_plot" "${files[@]}" "${labels[@]}" --compare "$out/compare_$tag" | tee -a "$out/summary.md"
done
true
