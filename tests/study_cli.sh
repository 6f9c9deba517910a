#!/usr/bin/env bash
# The study programs: softmax_lab's three Jacobians agree and its masks hold, and it
# writes its table and plots; attention_walkthrough prints the seeds' shapes step by step,
# matches nn::MultiHeadAttention and draws both sentences' heads; tag_dates learns to tag
# date characters on a small budget.
#   study_cli.sh EXAMPLES_DIR DATA_DIR SCRATCH_DIR
set -uo pipefail
bin=$1 data=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
contains() { grep -qF -- "$2" "$1" || { fail "$1 lacks '$2'"; head -60 "$1"; }; }

"$bin/softmax_lab" --out "$dir/lab" --trials 50 >"$dir/lab.out" 2>&1 || fail "softmax_lab exited $?"
contains "$dir/lab.out" "largest |autograd - formula|"
contains "$dir/lab.out" "every blocked weight is exactly 0: yes"
for f in saturation.csv saturation_profile.png saturation_gradient.png; do [ -s "$dir/lab/$f" ] || fail "no $f"; done
[ "$(wc -l <"$dir/lab/saturation.csv")" -eq 20 ] || fail "saturation.csv: expected a header and 19 rows"
"$bin/softmax_lab" --x 1,2,3,40 --out "$dir/lab2" --trials 5 >"$dir/lab2.out" 2>&1 || fail "softmax_lab --x exited $?"
contains "$dir/lab2.out" "1.00000   2.00000   3.00000  40.00000"
"$bin/softmax_lab" --x 1 >"$dir/lab3.out" 2>&1 && fail "softmax_lab --x 1 should fail"
contains "$dir/lab3.out" "at least two numbers"
"$bin/softmax_lab" --n abc >"$dir/lab4.out" 2>&1
[ $? -eq 2 ] || fail "softmax_lab --n abc should exit 2"
contains "$dir/lab4.out" "--n needs an integer, got 'abc'"
"$bin/softmax_lab" --trials 0 >"$dir/lab5.out" 2>&1
[ $? -eq 2 ] || fail "softmax_lab --trials 0 should exit 2"
contains "$dir/lab5.out" "--trials must be at least 1"
"$bin/attention_walkthrough" --seed x1 >"$dir/walk_bad.out" 2>&1
[ $? -eq 2 ] || fail "attention_walkthrough --seed x1 should exit 2"
contains "$dir/walk_bad.out" "--seed needs an integer"
"$bin/fit_sine" --steps 10x >"$dir/sine_bad.out" 2>&1
[ $? -eq 2 ] || fail "fit_sine --steps 10x should exit 2"
contains "$dir/sine_bad.out" "--steps needs an integer, got '10x'"
"$bin/fit_sine" --lr -1 >"$dir/sine_bad2.out" 2>&1
[ $? -eq 2 ] || fail "fit_sine --lr -1 should exit 2"
contains "$dir/sine_bad2.out" "--lr must be at least"

"$bin/attention_walkthrough" --out "$dir/walk" >"$dir/walk.out" 2>&1 || fail "attention_walkthrough exited $?"
# the seeds' sequence of shapes
for shape in "[2,5]" "[2,5,512]" "[2,8,5,64]" "[2,8,5,5]"; do contains "$dir/walk.out" "$shape"; done
order=$(grep -oE '\[[0-9,]+\]$' "$dir/walk.out" | tr '\n' ' ')
[ "$order" = "[2,5] [2,5,512] [2,5] [2,5,512] [2,8,5,64] [2,8,5,5] [2,8,5,5] [2,8,5,64] [2,5,512] [2,5,512] [2,5,512] " ] ||
  fail "walkthrough shapes: $order"
contains "$dir/walk.out" "largest weight on a pad key: 0"
for f in heads_sentence1.png heads_sentence2.png; do [ -s "$dir/walk/$f" ] || fail "no $f"; done

"$bin/tag_dates" --train "$data/train.tsv" --test "$data/test.tsv" --limit 2000 --steps 300 --eval-every 100 \
  --d-model 64 --heads 4 --layers 1 --ffn 128 --require 0.98 --threads 2 --out "$dir/tag" >"$dir/tag.out" 2>&1 ||
  { fail "tag_dates did not reach 98% per character"; cat "$dir/tag.out"; }
contains "$dir/tag.out" "test per-character accuracy"
[ -s "$dir/tag/self_attention.png" ] || fail "tag_dates drew no self_attention.png"
printf 'x\t2026-11-22\n' >"$dir/bad.tsv"
"$bin/tag_dates" --train "$dir/bad.tsv" --test "$dir/bad.tsv" >"$dir/tag_bad.out" 2>&1 && fail "tag_dates accepted a bad file"
contains "$dir/tag_bad.out" "bad.tsv:1"
contains "$dir/tag_bad.out" "not one of the eight forms"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all study checks passed"
