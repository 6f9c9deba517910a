#!/usr/bin/env bash
# The translate program end to end, at a tiny size: a short `train` writes checkpoints
# and curves that `eval`, `decode` and `attention` accept; --resume continues; Ctrl-C
# saves; bad input gives a clear message and a non-zero exit, never a crash.
#   translate_cli.sh TRANSLATE_BINARY DATA_DIR SCRATCH_DIR
set -uo pipefail
bin=$1 data=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

# run EXPECTED_EXIT NAME CMD...: runs CMD, output in $dir/NAME.out and .err
run() {
  local want=$1 name=$2
  shift 2
  "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  local got=$?
  [ "$got" -eq "$want" ] || { fail "$name: exit $got, expected $want"; cat "$dir/$name.err"; }
}
contains() {  # FILE TEXT
  grep -qF -- "$2" "$1" || { fail "$1 lacks '$2'"; sed 's/^/    /' "$1" | head -20; }
}

head -n 400 "$data/train.tsv" >"$dir/train.tsv"
head -n 40 "$data/valid.tsv" >"$dir/valid.tsv"
small=(--train "$dir/train.tsv" --valid "$dir/valid.tsv" --d-model 16 --heads 2 --enc-layers 1 --dec-layers 1
       --ffn 32 --batch 16 --eval-every 10 --save-every 10 --keep 2 --log-every 5 --threads 2)

run 0 train "$bin" train "${small[@]}" --out "$dir/run" --steps 30
contains "$dir/train.out" "step 30/30"
contains "$dir/train.out" "validation exact match"
contains "$dir/train.out" "tok/s"
contains "$dir/train.out" "remaining"
[ -f "$dir/run/curves.png" ] || fail "no curves.png"
[ "$(ls "$dir/run"/ckpt-*.h5 | wc -l)" -eq 2 ] || fail "expected the newest 2 checkpoints, got: $(ls "$dir/run")"
ckpt="$dir/run/ckpt-00000030.h5"
[ -f "$ckpt" ] || fail "no $ckpt"

run 1 again "$bin" train "${small[@]}" --out "$dir/run" --steps 30
contains "$dir/again.err" "already holds checkpoints"
run 0 resume "$bin" train "${small[@]}" --out "$dir/run" --steps 40 --resume auto
contains "$dir/resume.out" "resumed from $ckpt at step 30"
contains "$dir/resume.out" "step 40/40"
[ -f "$dir/run/ckpt-00000040.h5" ] || fail "resume did not save step 40"

run 0 eval "$bin" eval --checkpoint "$ckpt" --data "$dir/valid.tsv" --show 3
contains "$dir/eval.out" "40 pairs, exact match"
contains "$dir/eval.out" "per character"

run 0 decode "$bin" decode --checkpoint "$ckpt" "22/11/2026" "nov 3 1999"
[ "$(wc -l <"$dir/decode.out")" -eq 2 ] || fail "decode: expected 2 lines"

printf '22/11/2026\nthe 1st of may 1950 @\n\n2026 Nov 22\n' >"$dir/lines.txt"
run 1 decode_stdin "$bin" decode --checkpoint "$ckpt" <"$dir/lines.txt"
[ "$(wc -l <"$dir/decode_stdin.out")" -eq 4 ] || fail "decode from stdin: expected 4 output lines"
contains "$dir/decode_stdin.err" "line 2"
contains "$dir/decode_stdin.err" "'@' at position 21"
contains "$dir/decode_stdin.err" "line 3"
contains "$dir/decode_stdin.err" "the input is empty"

run 1 too_long "$bin" decode --checkpoint "$ckpt" "$(printf '1%.0s' $(seq 1 80))"
contains "$dir/too_long.err" "at most 63"

run 0 attention "$bin" attention --checkpoint "$ckpt" --out "$dir/att" "sunday, november 22, 2026"
for f in cross_attention_layer1.png encoder_self_attention_layer1.png; do
  [ -s "$dir/att/$f" ] || fail "attention did not write $f"
done

# bad input
run 1 missing_ckpt "$bin" eval --checkpoint "$dir/nope.h5" --data "$dir/valid.tsv"
contains "$dir/missing_ckpt.err" "nope.h5"
head -c 3000 "$ckpt" >"$dir/cut.h5"
run 1 cut_ckpt "$bin" decode --checkpoint "$dir/cut.h5" "22/11/2026"
contains "$dir/cut_ckpt.err" "truncated"
printf '22/11/2026\t2026-11-22\nno tab here\n' >"$dir/bad.tsv"
run 1 bad_data "$bin" eval --checkpoint "$ckpt" --data "$dir/bad.tsv"
contains "$dir/bad_data.err" "bad.tsv:2"
run 1 bad_train "$bin" train "${small[@]}" --train "$dir/bad.tsv" --out "$dir/run2" --steps 2
contains "$dir/bad_train.err" "bad.tsv:2"
printf '22/11/2026\t2026-11-22\n22 \xc3\xa9t\xc3\xa9 2026\t2026-06-22\n' >"$dir/unknown.tsv"
run 1 unknown_char "$bin" eval --checkpoint "$ckpt" --data "$dir/unknown.tsv"
contains "$dir/unknown_char.err" "unknown.tsv:2"
contains "$dir/unknown_char.err" "not in the vocabulary"
run 1 not_a_checkpoint "$bin" decode --checkpoint "$data/../../tests/data/adam.h5" "22/11/2026"
contains "$dir/not_a_checkpoint.err" "adam.h5"
contains "$dir/not_a_checkpoint.err" "not an ember checkpoint"

# a learning rate that blows the model up: training stops at the first non-finite loss,
# names the step, and keeps the last good checkpoint
run 3 nan "$bin" train "${small[@]}" --out "$dir/run4" --steps 200 --save-every 1 --lr 1e30 --warmup 1
contains "$dir/nan.err" "the loss is"
contains "$dir/nan.err" "stopping without saving"
contains "$dir/nan.err" "The last good checkpoint is"
last=$(ls "$dir/run4"/ckpt-*.h5 | tail -n 1)
run 0 nan_last_good "$bin" eval --checkpoint "$last" --data "$dir/valid.tsv"

run 2 bad_option "$bin" train --stepz 3
contains "$dir/bad_option.err" "unknown option --stepz"
run 2 bad_value "$bin" train --steps three
contains "$dir/bad_value.err" "--steps needs an integer"
run 2 no_command "$bin"

# Ctrl-C saves a checkpoint and exits
"$bin" train "${small[@]}" --out "$dir/run3" --steps 100000 --save-every 100000 >"$dir/sigint.out" 2>"$dir/sigint.err" &
pid=$!
for _ in $(seq 1 100); do grep -q "step 5/" "$dir/sigint.out" && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
code=$?
[ "$code" -eq 130 ] || fail "Ctrl-C: exit $code, expected 130"
contains "$dir/sigint.out" "interrupted at step"
ls "$dir/run3"/ckpt-*.h5 >/dev/null 2>&1 || fail "Ctrl-C saved no checkpoint"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all translate checks passed"
