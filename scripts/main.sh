#!/usr/bin/env bash
# The main job: install what is missing, build (Release), train the date translator on
# data/dates with every attention head watched (bfloat16 matrix products where the
# processor has AVX512_BF16, float32 elsewhere), then show what it learned: test accuracy,
# a few translations, the attention pictures, and how the heads' softmax saturated and
# passed gradient on during training. Extra arguments go to `translate train` (e.g.
# --steps 2000, --precision fp32).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh graphviz  # draw_graph renders SVG through dot
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target translate
translate=./build/examples/translate/translate
out=runs/dates-$(date +%Y%m%d-%H%M%S)

echo
echo "== training (checkpoints, log and curves in $out)"
mkdir -p "$out"
"$translate" train --out "$out" --watch --precision bf16 "$@" | tee "$out/train.log"
ckpt=$(sed -n 's/^checkpoint: //p' "$out/train.log" | tail -n 1)

echo
echo "== the test split"
"$translate" eval --checkpoint "$ckpt" --data data/dates/test.tsv

echo
echo "== a few translations"
samples=("sunday, november 22, 2026" "the 1st of january 1900" "February 29, 2024" "31.12.2099" "1969 Jul 20"
         "the 13th of october 1987" "dec 25 2000")
"$translate" decode --checkpoint "$ckpt" "${samples[@]}" | paste <(printf '%s\n' "${samples[@]}") - |
  awk -F'\t' '{ printf "  %-28s -> %s\n", $1, $2 }'

echo
echo "== where it looked"
"$translate" attention --checkpoint "$ckpt" --out "$out/attention" "sunday, november 22, 2026"
echo "training curves: $out/curves.png"

echo
echo "== the heads at the end of training (watch.h5, watch.csv and figures in $out: docs/watch-format.md)"
"$translate" watch --checkpoint "$ckpt"
