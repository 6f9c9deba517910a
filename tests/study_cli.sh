#!/usr/bin/env bash
# The study programs: softmax_lab's three Jacobians agree and its masks hold, and it
# writes its table and plots; attention_walkthrough prints the seeds' shapes step by step,
# matches nn::MultiHeadAttention and draws both sentences' heads; tag_dates learns to tag
# date characters on a small budget; fit_sine's loss falls. Each refuses a bad command
# line (exit 2), sizes too large and output it cannot write (exit 1) with a message
# saying what it expected and what it got, never an abort.
#   study_cli.sh TOOLS_DIR EXAMPLES_DIR DATA_DIR SCRATCH_DIR
set -uo pipefail
tools=$1 examples=$2 data=$3 dir=$4
# bin PROGRAM: its path; fit_sine and tag_dates are examples, the others tools
bin() { case $1 in fit_sine | tag_dates) echo "$examples/$1" ;; *) echo "$tools/$1" ;; esac; }
rm -rf "$dir" && mkdir -p "$dir"
. "$(dirname "$0")/cli_checks.sh"
export OMP_WAIT_POLICY=PASSIVE
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
contains() { grep -qF -- "$2" "$1" || { fail "$1 lacks '$2'"; head -60 "$1"; }; }
n=0
out=
# expect EXIT PROGRAM ARGS...: runs PROGRAM from TOOLS_DIR or EXAMPLES_DIR, its output (both streams) in $out
expect() {
  local want=$1 prog=$2
  shift 2
  n=$((n + 1))
  out="$dir/run$n.out"
  timeout 120 "$(bin "$prog")" "$@" >"$out" 2>&1
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$prog $*: exit $got, expected $want"
    head -40 "$out"
  fi
}
says() { contains "$out" "$1"; }

touch "$dir/a_file"
big=99999999999999999999999

# ---------------------------------------------------------------- softmax_lab
"$tools/softmax_lab" --out "$dir/lab" --trials 50 >"$dir/lab.out" 2>&1 || fail "softmax_lab exited $?"
contains "$dir/lab.out" "largest |autograd - formula|"
contains "$dir/lab.out" "every blocked weight is exactly 0: yes"
for f in saturation.csv saturation_profile.png saturation_gradient.png curvature.csv curvature.png \
  attention_curvature.csv attention_curvature.png; do
  [ -s "$dir/lab/$f" ] || fail "no $f"
done
# the double-backward Hessians equal diag(p) - p p^T to rounding
for what in logsumexp cross-entropy; do
  err=$(grep "largest |Hessian of $what" "$dir/lab.out" | awk '{ print $NF }')
  awk -v e="$err" 'BEGIN { exit !(e != "" && e + 0 < 1e-12) }' || fail "Hessian of $what differs by '$err'"
done
[ "$(wc -l <"$dir/lab/saturation.csv")" -eq 20 ] || fail "saturation.csv: expected a header and 19 rows"
# one attention layer's Hessian: a row per score scale; the queries saturate and the Wq, Wk
# block's largest eigenvalue grows with the scale, more than the Wv, Wo block's
[ "$(wc -l <"$dir/lab/attention_curvature.csv")" -eq 9 ] || fail "attention_curvature.csv: expected a header and 8 rows"
awk -F, 'NR == 2 { s0 = $2; qk0 = $7; vo0 = $8 } NR == 9 { exit !($2 > s0 + 0.5 && $7 > 1000 * qk0 && $7 / qk0 > 10 * $8 / vo0) }' \
  "$dir/lab/attention_curvature.csv" || fail "attention_curvature.csv: the curvature does not grow with the scale"
"$tools/softmax_lab" --x 1,2,3,40 --out "$dir/lab2" --trials 5 >"$dir/lab2.out" 2>&1 || fail "softmax_lab --x exited $?"
contains "$dir/lab2.out" "1.00000   2.00000   3.00000  40.00000"
expect 0 softmax_lab --x 1000,-1000,999.5 --out "$dir/lab3" --trials 5 --n 8
says "largest |numeric - formula|"
expect 2 softmax_lab --x 1
says 'at least two numbers, got "1"'
expect 2 softmax_lab --x 1,2,
says 'an empty item in "1,2,"'
expect 2 softmax_lab --x 1,,2
says "empty item"
expect 2 softmax_lab --x ""
expect 2 softmax_lab --x 1,nan
says '--x needs a number in [-1000, 1000], got "nan"'
expect 2 softmax_lab --x 1,-inf
expect 2 softmax_lab --x 1,1e400
says 'got "1e400"'
expect 2 softmax_lab --x 1,2000
expect 2 softmax_lab --x "$(seq -s, 1 65)"
says "at most 64 numbers"
expect 2 softmax_lab --n abc
says '--n needs an integer in [2, 65536], got "abc"'
expect 2 softmax_lab --n $big
says "--n needs an integer in [2, 65536], got \"$big\""
expect 2 softmax_lab --n 2147483648
says '--n needs an integer in [2, 65536], got "2147483648"'
expect 2 softmax_lab --n 100000000000
expect 2 softmax_lab --trials 0
says '--trials needs an integer in [1, 1000000], got "0"'
expect 2 softmax_lab --trials 1e3
expect 2 softmax_lab --seed -1
expect 2 softmax_lab --nn 3
says "unknown option"
expect 2 softmax_lab stray
says 'unexpected argument "stray"'
expect 0 softmax_lab --help
says "Usage: softmax_lab"
says "--trials INT in [1, 1000000]"
expect 1 softmax_lab --n 65536 --trials 1000000 --out "$dir/lab_big"
says "the saturation experiment with --n 65536 and --trials 1000000 would need about"
[ -e "$dir/lab_big" ] && fail "softmax_lab made its --out directory before refusing the sizes"
expect 1 softmax_lab --out "$dir/a_file/sub"
says "softmax_lab: cannot create the directory \"$dir/a_file/sub\" (--out): Not a directory"
expect 2 softmax_lab --out ""
says '--out needs a non-empty value'
mkdir -p "$dir/lab_csv/saturation.csv"
expect 1 softmax_lab --out "$dir/lab_csv" --trials 5
says "$dir/lab_csv/saturation.csv"
says "is a directory, not a regular file"

# A directory this shell cannot write into: as root, run the program as nobody.
as_user=()
mkdir -p "$dir/locked"
if [ "$(id -u)" -eq 0 ]; then
  command -v setpriv >/dev/null && as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
else
  chmod 555 "$dir/locked"
fi
if [ "$(id -u)" -ne 0 ] || { [ ${#as_user[@]} -gt 0 ] && "${as_user[@]}" test -x "$tools/softmax_lab" -a -x "$dir"; }; then
  n=$((n + 1)) out="$dir/run$n.out"
  "${as_user[@]}" "$tools/softmax_lab" --out "$dir/locked" --trials 5 >"$out" 2>&1
  [ $? -eq 1 ] || fail "softmax_lab into an unwritable directory should exit 1"
  says "cannot write into the directory \"$dir/locked\" (--out): Permission denied"
  n=$((n + 1)) out="$dir/run$n.out"
  "${as_user[@]}" "$tools/attention_walkthrough" --out "$dir/locked/sub" >"$out" 2>&1
  [ $? -eq 1 ] || fail "attention_walkthrough into an unwritable directory should exit 1"
  says "cannot create the directory \"$dir/locked/sub\" (--out): Permission denied"
else
  echo "skipped: the unwritable-directory runs (cannot run as another user here)"
fi

# ---------------------------------------------------------------- attention_walkthrough
"$tools/attention_walkthrough" --out "$dir/walk" >"$dir/walk.out" 2>&1 || fail "attention_walkthrough exited $?"
# the seeds' sequence of shapes
for shape in "[2,5]" "[2,5,512]" "[2,8,5,64]" "[2,8,5,5]"; do contains "$dir/walk.out" "$shape"; done
order=$(grep -oE '\[[0-9,]+\]$' "$dir/walk.out" | tr '\n' ' ')
[ "$order" = "[2,5] [2,5,512] [2,5] [2,5,512] [2,8,5,64] [2,8,5,5] [2,8,5,5] [2,8,5,64] [2,5,512] [2,5,512] [2,5,512] [2,8,5,5] [2,8,5,5] " ] ||
  fail "walkthrough shapes: $order"
contains "$dir/walk.out" "largest weight on a pad key: 0"
contains "$dir/walk.out" "dL/dscores equals softmax_backward(dL/dweights, weights) exactly: yes"
contains "$dir/walk.out" "largest |dL/dscores| at a pad key: 0"
for f in heads_sentence1.png heads_sentence2.png score_gradients_sentence1.png; do [ -s "$dir/walk/$f" ] || fail "no $f"; done
expect 2 attention_walkthrough --seed x1
says '--seed needs an integer in [0, 2^63-1], got "x1"'
expect 2 attention_walkthrough --seed $big
says "--seed needs an integer in [0, 2^63-1], got \"$big\""
expect 2 attention_walkthrough --seed 0x10
expect 2 attention_walkthrough --seed
expect 2 attention_walkthrough --out "$dir/walk" stray
says 'unexpected argument "stray"'
expect 0 attention_walkthrough --help
says "Usage: attention_walkthrough"
expect 1 attention_walkthrough --out "$dir/a_file"
says "cannot create the directory \"$dir/a_file\" (--out): Not a directory"
mkdir -p "$dir/walk_png/heads_sentence1.png"
expect 1 attention_walkthrough --out "$dir/walk_png"
says "$dir/walk_png/heads_sentence1.png"
says "is a directory, not a regular file"

# ---------------------------------------------------------------- fit_sine
expect 0 fit_sine --steps 50
says "loss fell from"
expect 2 fit_sine --steps 10x
says '--steps needs an integer in [2, 2^40], got "10x"'
expect 2 fit_sine --steps 1
expect 2 fit_sine --steps $big
expect 2 fit_sine --hidden 2147483648
says '--hidden needs an integer in [1, 65536], got "2147483648"'
expect 2 fit_sine --hidden 100000000000
expect 2 fit_sine --lr -1
says '--lr needs a number in [1e-09, 10], got "-1"'
expect 2 fit_sine --lr inf
expect 2 fit_sine --lr 0x1p3
expect 2 fit_sine --steps
expect 2 fit_sine --stepz 3
says "unknown option"
expect 0 fit_sine --help
says "Usage: fit_sine"
expect 1 fit_sine --lr 10 --steps 100
says "fit_sine: the loss became"
says "--lr 10 is too large"

# ---------------------------------------------------------------- tag_dates
tag=(--train "$data/train.tsv" --test "$data/test.tsv")
small=(--d-model 16 --heads 2 --layers 1 --ffn 16 --limit 2000 --steps 1 --warmup 0 --eval-every 1)
"$examples/tag_dates" "${tag[@]}" --limit 2000 --steps 300 --eval-every 100 \
  --d-model 64 --heads 4 --layers 1 --ffn 128 --require 0.98 --threads 2 --out "$dir/tag" >"$dir/tag.out" 2>&1 ||
  { fail "tag_dates did not reach 98% per character"; cat "$dir/tag.out"; }
contains "$dir/tag.out" "test per-character accuracy"
[ -s "$dir/tag/self_attention.png" ] || fail "tag_dates drew no self_attention.png"
printf 'x\t2026-11-22\n' >"$dir/bad.tsv"
expect 1 tag_dates --train "$dir/bad.tsv" --test "$dir/bad.tsv" --out "$dir/tag_bad"
says "bad.tsv:1"
says '"x" is not one of the eight forms'
expect 1 tag_dates --train "$data" --test "$data/test.tsv" --out "$dir/tag_bad"
says "is a directory"
expect 1 tag_dates --train "$dir/no_such.tsv" --out "$dir/tag_bad"
says "No such file or directory"
expect 1 tag_dates "${tag[@]}" --limit 5 --steps 2 --warmup 1 --out "$dir/tag_bad"
says "is not in the vocabulary of $data/train.tsv (its first 5 pairs, --limit 5)"
expect 2 tag_dates "${tag[@]}" --d-model 64 --heads 5 --out "$dir/tag_disagree"
says "--heads 5 must divide --d-model 64"
# a rate of 0 would train nothing: refused as translate refuses it
expect 2 tag_dates "${tag[@]}" --lr 0 --out "$dir/tag_disagree"
says '--lr needs a number in (0, 10], got "0"'
expect 2 tag_dates "${tag[@]}" --steps 50 --out "$dir/tag_disagree"
says "--warmup 100 (the default) must be less than --steps 50"
[ -e "$dir/tag_disagree" ] && fail "tag_dates made its --out though its options disagree"
# a bad data file is named first, with its line, and the options' disagreement after it
printf '22/11/2026\n' >"$dir/notab.tsv"
expect 1 tag_dates --train "$dir/notab.tsv" --steps 1 --out "$dir/tag_bad"
head -1 "$out" | grep -qF "$dir/notab.tsv:1: no tab in \"22/11/2026\"" || fail "tag_dates: not the file first: $(head -1 "$out")"
says "tag_dates: and --warmup 100 (the default) must be less than --steps 1"
expect 1 tag_dates --train "$data/train.tsv" --limit 50 --test "$dir/notab.tsv" --heads 5 --out "$dir/tag_bad"
head -1 "$out" | grep -qF "$dir/notab.tsv:1: no tab in" || fail "tag_dates: not the test file first: $(head -1 "$out")"
says "tag_dates: and --heads 5 must divide --d-model 64"
expect 2 tag_dates --d-model 100000000000
says '--d-model needs an integer in [1, 2^20], got "100000000000"'
expect 2 tag_dates --heads 2147483648
says '--heads needs an integer in [1, 2^20], got "2147483648"'
expect 2 tag_dates --layers $big
says "--layers needs an integer in [1, 1024], got \"$big\""
expect 2 tag_dates --batch 1e3
says '--batch needs an integer in [1, 2^20], got "1e3"'
expect 2 tag_dates --dropout 1
says '--dropout needs a number in [0, 0.99], got "1"'
expect 2 tag_dates --lr nan
expect 2 tag_dates --threads 0
expect 2 tag_dates --train ""
says '--train needs a non-empty value'
expect 2 tag_dates --lim 5
says "unknown option"
expect 0 tag_dates --help
says "Usage: tag_dates"
expect 1 tag_dates "${tag[@]}" --d-model 65536 --ffn 65536 --heads 4 --out "$dir/tag_bad"
says "training a tagger of --d-model 65536, --ffn 65536, --layers 2 on batches of 500 would need about"
expect 1 tag_dates "${tag[@]}" --out "$dir/a_file/sub"
says "tag_dates: cannot create the directory \"$dir/a_file/sub\" (--out): Not a directory"
mkdir -p "$dir/tag_png/self_attention.png"
expect 1 tag_dates "${tag[@]}" "${small[@]}" --out "$dir/tag_png"
says "$dir/tag_png/self_attention.png"
says "is a directory, not a regular file"

# ---------------------------------------------------------------- every program's options
for prog in softmax_lab attention_walkthrough tag_dates fit_sine gradcheck make_dates attention_probe watch_plot; do
  options_need_values "$prog" "$(bin "$prog")"
done
expect 2 tag_dates --watch=maybe
says 'tag_dates: --watch is a switch and takes no value, got "maybe"'
expect 2 watch_plot
says "watch_plot: FILE is required: watch.h5 files"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all study checks passed ($n runs)"
