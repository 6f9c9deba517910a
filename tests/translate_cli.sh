#!/usr/bin/env bash
# The translate program end to end, at a tiny size: a short `train` writes checkpoints
# and curves that `eval`, `decode` and `attention` accept; --resume continues; Ctrl-C
# saves; bad input gives a clear message and a non-zero exit, never a crash.
#   translate_cli.sh TRANSLATE_BINARY DATA_DIR SCRATCH_DIR
set -uo pipefail
bin=$1 data=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
. "$(dirname "$0")/cli_checks.sh"

head -n 400 "$data/train.tsv" >"$dir/train.tsv"
head -n 40 "$data/valid.tsv" >"$dir/valid.tsv"
small=(--train "$dir/train.tsv" --valid "$dir/valid.tsv" --d-model 16 --heads 2 --enc-layers 1 --dec-layers 1
       --ffn 32 --batch 16 --eval-every 10 --save-every 10 --keep 2 --log-every 5 --threads 2)

run 0 train "$bin" train "${small[@]}" --out "$dir/run" --steps 30
contains "$dir/train.out" "step 30/30"
contains "$dir/train.out" "validation exact match"
contains "$dir/train.out" "tok/s"
contains "$dir/train.out" "remaining"
# a run that ends by step 100 measured no step's memory, and says nothing about it
contains "$dir/train.out" "memory: peak"
grep -q "0 of 0 training steps" "$dir/train.out" && fail "a 30-step run reported its unmeasured steps' memory"
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

# a byte-order mark before the first line of standard input is not a character
printf '\xef\xbb\xbf22/11/2026\n' >"$dir/bom.txt"
run 0 decode_bom "$bin" decode --checkpoint "$ckpt" <"$dir/bom.txt"

# decode translates a batch at a time: a file's translations are those of its lines given
# all at once, endless input is answered as it comes, and a producer that waits for each
# answer gets it
{ cut -f1 "$dir/train.tsv" | head -n 300; printf 'bad @\n\n'; cut -f1 "$dir/train.tsv" | tail -n 100; } >"$dir/many.txt"
mapfile -t many <"$dir/many.txt"
run 1 many_args "$bin" decode --checkpoint "$ckpt" "${many[@]}"
run 1 many_stdin "$bin" decode --checkpoint "$ckpt" <"$dir/many.txt"
[ "$(wc -l <"$dir/many_stdin.out")" -eq 402 ] || fail "decode of 402 lines: $(wc -l <"$dir/many_stdin.out") outputs"
cmp -s "$dir/many_args.out" "$dir/many_stdin.out" || fail "decode: a file's translations differ from its lines'"
contains "$dir/many_stdin.err" "line 301 (\"bad @\")"
contains "$dir/many_stdin.err" "line 302"
timeout 10 bash -c 'yes 12/03/2001 | "$0" decode --checkpoint "$1"' "$bin" "$ckpt" 2>/dev/null | head -n 3 >"$dir/endless.out"
[ "$(wc -l <"$dir/endless.out")" -eq 3 ] || fail "decode of endless input gave $(wc -l <"$dir/endless.out") lines, not 3"
coproc answers { exec "$bin" decode --checkpoint "$ckpt" 2>"$dir/answers.err"; }
answers_pid=$answers_PID  # (bash unsets answers_PID once the process ends)
echo 22/11/2026 >&"${answers[1]}"
IFS= read -t 30 -r answer <&"${answers[0]}" || fail "decode kept the answer to a line until its input ended"
[ "$answer" = "$(head -n 1 "$dir/decode.out")" ] || fail "decode answered '$answer' to 22/11/2026"
eval "exec ${answers[1]}>&-"
wait "$answers_pid" || fail "decode of one line at a time: exit $?"

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
# the bad file is named before options that disagree (and no run directory is made)
run 1 bad_train_first "$bin" train "${small[@]}" --train "$dir/bad.tsv" --out "$dir/run2b" --steps 2 --warmup 5
contains "$dir/bad_train_first.err" "bad.tsv:2"
[ ! -e "$dir/run2b" ] || fail "a run refused for its data made $dir/run2b"
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
contains "$dir/bad_option.err" 'unknown option "--stepz"'
run 2 bad_value "$bin" train --steps three
contains "$dir/bad_value.err" "--steps needs an integer"
run 2 no_command "$bin"

# Ctrl-C saves a checkpoint and exits. (With job control on, so that the background run
# does not start with SIGINT ignored, as a non-interactive shell's background jobs do -
# and a signal a process starts ignoring stays ignored.)
set -m
"$bin" train "${small[@]}" --out "$dir/run3" --steps 100000 --save-every 100000 >"$dir/sigint.out" 2>"$dir/sigint.err" &
pid=$!
for _ in $(seq 1 600); do grep -q "step 5/" "$dir/sigint.out" && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
code=$?
[ "$code" -eq 130 ] || fail "Ctrl-C: exit $code, expected 130"
contains "$dir/sigint.out" "stopped by SIGINT at step"
ls "$dir/run3"/ckpt-*.h5 >/dev/null 2>&1 || fail "Ctrl-C saved no checkpoint"


# SIGTERM (what schedulers send), SIGHUP and SIGUSR1 (a scheduler's warning before its
# time limit) save as Ctrl-C does, with the conventional exit codes, and the run resumes
# from what they saved
for sig in TERM HUP USR1; do
  out="$dir/run_$sig"
  "$bin" train "${small[@]}" --out "$out" --steps 100000 --save-every 100000 >"$dir/sig$sig.out" 2>"$dir/sig$sig.err" &
  pid=$!
  for _ in $(seq 1 600); do grep -q "step 5/" "$dir/sig$sig.out" && break; sleep 0.1; done
  kill -"$sig" "$pid"
  wait "$pid"
  code=$?
  want=$((128 + $(kill -l "$sig")))
  [ "$code" -eq "$want" ] || fail "SIG$sig: exit $code, expected $want"
  contains "$dir/sig$sig.out" "stopped by SIG$sig at step"
  ls "$out"/ckpt-*.h5 >/dev/null 2>&1 || fail "SIG$sig saved no checkpoint"
  saved=$(sed -n 's/^stopped by SIG[A-Z]* at step \([0-9]*\).*/\1/p' "$dir/sig$sig.out")
  run 0 "sig${sig}_resume" "$bin" train "${small[@]}" --out "$out" --steps $((saved + 2)) --resume auto
  contains "$dir/sig${sig}_resume.out" "at step $saved"
done

# two runs on one directory: the second refuses, naming the first one's process, with
# or without --resume auto; the lock goes with the first run
"$bin" train "${small[@]}" --out "$dir/shared" --steps 100000 --save-every 100000 >"$dir/first.out" 2>&1 &
first=$!
for _ in $(seq 1 600); do grep -q "step 2/" "$dir/first.out" && break; sleep 0.1; done
run 1 second "$bin" train "${small[@]}" --out "$dir/shared" --steps 5
contains "$dir/second.err" "in use by another run (process $first"
run 1 second_resume "$bin" train "${small[@]}" --out "$dir/shared" --steps 5 --resume auto
contains "$dir/second_resume.err" "in use by another run (process $first"
kill -TERM "$first"
wait "$first"
run 0 after_first "$bin" train "${small[@]}" --out "$dir/shared" --steps 20 --resume auto
# a run killed outright leaves its lock to the kernel: the next run proceeds
"$bin" train "${small[@]}" --out "$dir/shared" --steps 100000 --resume auto >"$dir/killed.out" 2>&1 &
victim=$!
for _ in $(seq 1 600); do grep -q "resumed from" "$dir/killed.out" && break; sleep 0.1; done
kill -KILL "$victim"
wait "$victim" 2>/dev/null
# ...and so does the temporary file of a save it was killed in: the next run removes it
# (a process that has ended is proven dead; its pid names the file)
sh -c 'exit 0' &
dead=$!
wait "$dead"
head -c 5000 /dev/urandom >"$dir/shared/.ckpt-00000021.h5.tmp-$dead-0"
run 0 after_kill "$bin" train "${small[@]}" --out "$dir/shared" --steps 22 --resume auto
# (the run killed above may have left one of its own, if the kill landed in a save)
grep -qE "removed [12] temporary file" "$dir/after_kill.out" || fail "after_kill: no stale temporary file removed"
ls -a "$dir/shared" | grep -q "tmp-" && fail "a temporary file is left in $dir/shared: $(ls -a "$dir/shared")"

# a lock that is a symbolic link is refused, and the file it points to left as it was
printf 'precious\n' >"$dir/victim.txt"
mkdir -p "$dir/sl" && ln -s "$dir/victim.txt" "$dir/sl/.lock"
run 1 symlink_lock "$bin" train "${small[@]}" --out "$dir/sl" --steps 10
contains "$dir/symlink_lock.err" "'$dir/sl/.lock' is a symbolic link, not a regular file"
[ "$(cat "$dir/victim.txt")" = precious ] || fail "the lock's symbolic link truncated $dir/victim.txt"

# --resume auto skips a damaged newest checkpoint, names it, and resumes from the newest
# intact one
cp -r "$dir/run" "$dir/damaged"
rm -f "$dir/damaged/.lock"
printf 'garbage' | dd of="$dir/damaged/ckpt-00000040.h5" bs=1 seek=5000 conv=notrunc 2>/dev/null
run 0 damaged "$bin" train "${small[@]}" --out "$dir/damaged" --steps 45 --resume auto
contains "$dir/damaged.err" "ckpt-00000040.h5 is damaged"
contains "$dir/damaged.out" "resumed from $dir/damaged/ckpt-00000030.h5 at step 30"
# one whose bytes are whole but which is refused (here: another schema version) is not
# skipped for an older one, which would throw away the steps since: the run stops, naming
# it, and the file stays where it was
cp -r "$dir/run" "$dir/refused"
rm -f "$dir/refused/.lock"
printf '7' | dd of="$dir/refused/ckpt-00000040.h5" bs=1 seek=24 conv=notrunc 2>/dev/null  # "schema 1" -> "schema 7"
run 1 refused "$bin" train "${small[@]}" --out "$dir/refused" --steps 45 --resume auto
contains "$dir/refused.err" "ckpt-00000040.h5' is refused and left in place"
contains "$dir/refused.err" "schema version 7 is not known to this build"
[ -f "$dir/refused/ckpt-00000040.h5" ] && [ ! -e "$dir/refused/ckpt-00000040.h5.damaged" ] ||
  fail "the refused checkpoint was moved"

# options on resume: the model's shape, the schedule and the seed are the checkpoint's;
# a different value is refused by its option's name; the others apply and are named
run 1 resume_shape "$bin" train "${small[@]}" --out "$dir/run" --steps 50 --resume auto --d-model 32 --lr 0.002 --seed 9
contains "$dir/resume_shape.err" "--d-model 32 (the checkpoint's d_model is 16)"
contains "$dir/resume_shape.err" "--lr 0.002 (the checkpoint's peak learning rate is 0.003)"
contains "$dir/resume_shape.err" "--seed 9 (the checkpoint's seed is 1)"
run 1 resume_schedule "$bin" train "${small[@]}" --out "$dir/run" --steps 50 --resume auto --schedule inverse-sqrt \
  --decay-steps 900 --warmup 150 --min-lr 0.00015
contains "$dir/resume_schedule.err" "--schedule inverse-sqrt (the checkpoint's schedule is cosine)"
contains "$dir/resume_schedule.err" "--decay-steps 900 (the checkpoint's decay steps is 700)"
grep -q -- "--min-lr" "$dir/resume_schedule.err" && fail "--min-lr 0.00015 (the checkpoint's) was refused"
# an inverse-sqrt run resumes as one; its rate is peak * sqrt(warmup / step) after the warmup
run 0 isqrt "$bin" train "${small[@]}" --out "$dir/isqrt" --steps 20 --schedule inverse-sqrt --lr 0.002 --warmup 5
contains "$dir/isqrt.out" "lr 1.00e-03"  # step 20: 0.002 * sqrt(5 / 20)
run 0 isqrt_resume "$bin" train "${small[@]}" --out "$dir/isqrt" --steps 25 --resume auto
contains "$dir/isqrt_resume.out" "lr 8.94e-04"  # step 25
# the cosine's rate: peak * step / warmup, then min + (peak - min) (1 + cos(pi t)) / 2, then min
run 0 cosine "$bin" train "${small[@]}" --out "$dir/cosine" --steps 30 --lr 0.004 --warmup 10 --decay-steps 20 \
  --min-lr 0.001 --log-every 5 --save-every 100
contains "$dir/cosine.out" "lr 2.00e-03"  # step 5
contains "$dir/cosine.out" "lr 2.50e-03"  # step 15: t = 1/2
contains "$dir/cosine.out" "lr 1.00e-03"  # step 25
# resuming checks the checkpoint's schedule, not a new run's defaults: equal values match
run 0 cosine_equal "$bin" train "${small[@]}" --out "$dir/cosine" --steps 32 --resume auto --decay-steps 20 \
  --min-lr 0.001 --warmup 10 --schedule cosine
contains "$dir/cosine_equal.out" "--schedule cosine, --warmup 10, --decay-steps 20, --min-lr 0.001 match the checkpoint"
run 0 isqrt_long "$bin" train "${small[@]}" --out "$dir/isqrt_long" --steps 2 --schedule inverse-sqrt --warmup 800
run 0 isqrt_long_resume "$bin" train "${small[@]}" --out "$dir/isqrt_long" --steps 3 --resume auto --warmup 800
run 1 isqrt_cosine_options "$bin" train "${small[@]}" --out "$dir/isqrt_long" --steps 4 --resume auto --min-lr 0.01
contains "$dir/isqrt_cosine_options.err" "--min-lr 0.01 (the checkpoint's schedule is inverse-sqrt, which has none)"
run 2 isqrt_decay "$bin" train "${small[@]}" --out "$dir/isqrt_new" --schedule inverse-sqrt --decay-steps 900
contains "$dir/isqrt_decay.err" "--decay-steps applies to --schedule cosine only"
# refusals give the checkpoint's value in full
run 0 lr_digits "$bin" train "${small[@]}" --out "$dir/digits" --steps 2 --lr 0.0012345678
run 1 lr_digits_resume "$bin" train "${small[@]}" --out "$dir/digits" --steps 3 --resume auto --lr 0.00123457
contains "$dir/lr_digits_resume.err" "--lr 0.00123457 (the checkpoint's peak learning rate is 0.0012345678)"
python=${PYTHON:-/usr/bin/python3}
if "$python" -c "import h5py" 2>/dev/null; then
  # crafted values a saved checkpoint never holds are refused, naming the key
  crafted() {  # crafted <name> <python statements on the open file f> <expected message>
    cp "$dir/cosine/ckpt-00000030.h5" "$dir/$1.h5"
    "$python" - "$dir/$1.h5" "$2" <<'PY'
import sys, zlib, h5py, numpy as np
path = sys.argv[1]
with h5py.File(path, "r+") as f:
    def put(key, value):
        del f[key]
        f[key] = value
    exec(sys.argv[2])
b = bytearray(open(path, "rb").read())
head = b"ember checkpoint\nschema 1\nsize %d\ncrc32 %08x\n" % (len(b), zlib.crc32(bytes(b[512:])) & 0xffffffff)
b[:512] = head + b"\0" * (512 - len(head))
open(path, "wb").write(b)
PY
    run 1 "$1" "$bin" train "${small[@]}" --out "$dir/$1" --steps 40 --resume "$dir/$1.h5"
    contains "$dir/$1.err" "$3"
  }
  # a schedule whose counter disagrees with the run's step is refused, naming the key
  crafted skewed 'f["schedule"].attrs["last_step"] = 5' "key '/schedule' attribute 'last_step' is 5, but the run is at step 30"
  # a number of processes that cannot be is refused, not printed
  crafted worlds 'put("extra/world_size", np.array([0], np.int64))' \
    "key '/extra/world_size' should hold the number of processes that saved it, an int64 in [1, 1048576]"
  crafted world_huge 'put("extra/world_size", np.array([2**63 - 1], np.int64))' \
    "an int64 in [1, 1048576] of shape [1]; got int64 [1] holding 9223372036854775807"
  crafted world_matrix 'put("extra/world_size", np.array([[1]], np.int64))' \
    "key '/extra/world_size' should hold the number of processes that saved it, an int64 in [1, 1048576] of shape [1]; got int64 [1,1]"
  crafted precision_two 'put("extra/bf16_products", np.array([2], np.int64))' \
    "key '/extra/bf16_products' should hold 1 if it trained under --precision bf16, else 0, an int64 in [0, 1] of shape [1]; got int64 [1] holding 2"
  crafted epoch_huge 'put("progress/epoch", np.int64(2**63 - 1))' "key '/progress/epoch': should be in [0, 2^62]"
  crafted epoch_int32 'put("progress/epoch", np.int32(0))' "key '/progress/epoch': is stored as int32"
  crafted adam_step_huge 'name = sorted(f["optimizer/state"])[0]; put("optimizer/state/%s/step" % name, np.int64(2**63 - 1))' \
    "/step': should be in [1, 2^62]"
  crafted adam_moment_negative 'name = sorted(f["optimizer/state"])[0]; v = f["optimizer/state/%s/exp_avg_sq" % name][()]; v.flat[0] = -1; put("optimizer/state/%s/exp_avg_sq" % name, v)' \
    "slot 'exp_avg_sq': holds a negative value"
  # an optimizer whose rate or moment decay is not what train gives it is refused, not trained on
  crafted lr_huge 'f["optimizer"].attrs["lr"] = 1.8e19' "key '/optimizer' attribute 'lr' is 1.8e+19, but train's Adam has"
  crafted beta2_edited 'f["optimizer"].attrs["beta2"] = 0.5' "key '/optimizer' attribute 'beta2' is 0.5, but train's Adam has 0.98"
  crafted weight_nan 'name = sorted(f["model"])[0]; v = f["model/" + name][()]; v.flat[0] = np.nan; put("model/" + name, v)' \
    "holds a value that is not finite"
  crafted accuracy_above_one 'put("extra/valid_history", np.array([[10.0, 1.5]]))' \
    "key '/extra/valid_history' row 0 is (10, 1.5): expected a whole step in [0, 30] and an accuracy in [0, 1]"
  crafted history_flat 'put("extra/valid_history", np.array([10.0, 0.5]))' \
    "key '/extra/valid_history' should hold (step, accuracy) pairs, float64 [n, 2]; got float64 [2]"
  crafted loss_nan 'put("extra/loss_history", np.array([[10.0, 2.0], [20.0, np.nan]]))' \
    "key '/extra/loss_history' row 1 is (20, nan): expected a whole step in [10, 30] and a finite loss"
  crafted loss_unordered 'put("extra/loss_history", np.array([[20.0, 2.0], [10.0, 1.0]]))' \
    "key '/extra/loss_history' row 1 is (10, 1)"
  # the model's padding index must be the vocabularies' '<pad>': resume, eval and decode
  # refuse another, naming the file, the key and both indices
  crafted pad_slash 'f["config"].attrs["pad_id"] = np.int64(7)' \
    "pad_slash.h5': key '/config' attribute 'pad_id' is 7, but '<pad>' is token 0 of '/vocab/source' (its token 7 is"
  run 1 pad_slash_eval "$bin" eval --checkpoint "$dir/pad_slash.h5" --data "$dir/valid.tsv"
  run 1 pad_slash_decode "$bin" decode --checkpoint "$dir/pad_slash.h5" "1/2/2000"
  contains "$dir/pad_slash_decode.err" "key '/config' attribute 'pad_id' is 7, but '<pad>' is token 0"
  contains "$dir/pad_slash_eval.err" "key '/config' attribute 'pad_id' is 7, but '<pad>' is token 0"
  # an index within the source's vocabulary but past the target's is refused as out of range
  crafted pad_past_target 'f["config"].attrs["pad_id"] = np.int64(f["config"].attrs["tgt_vocab"])' \
    "pad_past_target.h5': key '/config' attribute 'pad_id' must be in [0, "
  run 1 pad_past_target_decode "$bin" decode --checkpoint "$dir/pad_past_target.h5" "1/2/2000"
  contains "$dir/pad_past_target_decode.err" "key '/config' attribute 'pad_id' must be in [0, "
  # the open progress window of a save must fit between the last logged step and the save
  crafted window_long 'put("extra/loss_window", np.array([1.0, 99.0]))' \
    "key '/extra/loss_window' should hold the open progress window's (loss sum, steps), float64 [2], its steps a whole number in [0, 0]"
  crafted window_nan 'put("extra/loss_window", np.array([np.nan, 0.0]))' "got float64 [2] holding (nan, 0)"

  # a run saved between two logged steps (--save-every 7, --log-every 5) and resumed logs
  # the curve of the run that never stopped: the mean at step 10 covers steps 6 to 10
  run 0 unstopped "$bin" train "${small[@]}" --out "$dir/unstopped" --steps 20 --save-every 7 --keep 5
  mkdir -p "$dir/restarted" && cp "$dir/unstopped/ckpt-00000007.h5" "$dir/restarted/"
  run 0 restarted "$bin" train "${small[@]}" --out "$dir/restarted" --steps 20 --save-every 7 --resume auto
  "$python" - "$dir/unstopped/ckpt-00000020.h5" "$dir/restarted/ckpt-00000020.h5" <<'PY' >"$dir/window.out" 2>&1 ||
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["extra/loss_history"][()] for p in sys.argv[1:])
assert a.shape == (4, 2) and list(a[:, 0]) == [5, 10, 15, 20], a
assert np.array_equal(a, b), f"uninterrupted {a.tolist()}, resumed {b.tolist()}"
PY
    fail "the resumed run's loss curve is not the uninterrupted one's: $(tail -3 "$dir/window.out")"
else
  echo "skipped: the edited-schedule check needs python3 with h5py"
fi
run 2 decay_short "$bin" train "${small[@]}" --out "$dir/short" --decay-steps 150
contains "$dir/decay_short.err" "--decay-steps (150) must be larger than --warmup (150)"
run 2 min_above "$bin" train "${small[@]}" --out "$dir/short" --lr 0.001 --min-lr 0.002
contains "$dir/min_above.err" "--min-lr (0.002) must not exceed --lr (0.001)"
run 2 bad_schedule "$bin" train "${small[@]}" --out "$dir/short" --schedule linear
contains "$dir/bad_schedule.err" "--schedule must be inverse-sqrt or cosine, got 'linear'"
run 0 resume_applies "$bin" train "${small[@]}" --out "$dir/run" --steps 42 --resume auto --d-model 16
contains "$dir/resume_applies.out" "--steps 42"
contains "$dir/resume_applies.out" "apply from here on"
contains "$dir/resume_applies.out" "on resume: --d-model 16, --heads 2"
contains "$dir/resume_applies.out" "match the checkpoint"

# an unwritable figure is a warning: training goes on and saves
mkdir -p "$dir/figs/curves.png"
run 0 figure "$bin" train "${small[@]}" --out "$dir/figs" --steps 10
contains "$dir/figure.err" "warning: training goes on without the curves"
[ -f "$dir/figs/ckpt-00000010.h5" ] || fail "no checkpoint after a failing figure"

# an output directory that cannot be written is found before training
printf 'x' >"$dir/a_file"
run 1 out_under_file "$bin" train "${small[@]}" --out "$dir/a_file/run" --steps 10
contains "$dir/out_under_file.err" "cannot create the directory"
grep -q "^step" "$dir/out_under_file.out" && fail "training started on an unusable --out"
if [ "$(id -u)" -eq 0 ]; then
  mkdir -p "$dir/readonly" && chmod 755 "$dir/readonly" && chmod o+rx "$dir"
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$bin" train "${small[@]}" --out "$dir/readonly" --steps 10 \
    >"$dir/readonly.out" 2>"$dir/readonly.err"
  code=$?
else
  mkdir -p "$dir/readonly" && chmod 555 "$dir/readonly"
  "$bin" train "${small[@]}" --out "$dir/readonly" --steps 10 >"$dir/readonly.out" 2>"$dir/readonly.err"
  code=$?
fi
[ "$code" -eq 1 ] || fail "read-only --out: exit $code, expected 1"
contains "$dir/readonly.err" "Permission denied"

# a file-size limit during a save: exit 1 with the reason, the previous checkpoint intact,
# no temporary file left
mkdir -p "$dir/fsize"
run 0 fsize_first "$bin" train "${small[@]}" --out "$dir/fsize" --steps 10
before=$(md5sum <"$dir/fsize/ckpt-00000010.h5")
(ulimit -f 100; exec "$bin" train "${small[@]}" --out "$dir/fsize" --steps 20 --resume auto) >"$dir/fsize.out" 2>"$dir/fsize.err"
code=$?
[ "$code" -eq 1 ] || fail "save past the file-size limit: exit $code, expected 1"
contains "$dir/fsize.err" "File too large"
contains "$dir/fsize.err" "The last good checkpoint is $dir/fsize/ckpt-00000010.h5"
[ "$(md5sum <"$dir/fsize/ckpt-00000010.h5")" = "$before" ] || fail "the previous checkpoint changed"
ls -a "$dir/fsize" | grep -q "tmp-" && fail "a temporary file is left: $(ls -a "$dir/fsize")"
run 0 fsize_intact "$bin" eval --checkpoint "$dir/fsize/ckpt-00000010.h5" --data "$dir/valid.tsv"

# a full disk (a small tmpfs; needs root): the same, with "No space left on device"
if [ "$(id -u)" -eq 0 ] && mkdir -p "$dir/full" && mount -t tmpfs -o size=400k tmpfs "$dir/full" 2>/dev/null; then
  run 1 disk_full "$bin" train "${small[@]}" --out "$dir/full" --steps 30
  contains "$dir/disk_full.err" "No space left on device"
  contains "$dir/disk_full.err" "The last good checkpoint is $dir/full/ckpt-00000010.h5"
  ls -a "$dir/full" | grep -q "tmp-" && fail "a temporary file is left on the full disk: $(ls -a "$dir/full")"
  run 0 disk_full_intact "$bin" eval --checkpoint "$dir/full/ckpt-00000010.h5" --data "$dir/valid.tsv"
  umount "$dir/full"
else
  echo "skipped: the full-disk test needs root (to mount a small tmpfs)"
fi

# numbers out of range are refused with the range, not clamped or wrapped
run 2 huge_steps "$bin" train --steps 99999999999999999999999
contains "$dir/huge_steps.err" "--steps needs an integer in [1, 2^40]"
run 2 huge_threads "$bin" train --threads 2147483648
contains "$dir/huge_threads.err" "--threads needs an integer in [1, 1024]"
run 2 huge_keep "$bin" train --keep 2147483648
contains "$dir/huge_keep.err" "--keep needs an integer"
run 2 huge_pad "$bin" attention --checkpoint "$ckpt" --out "$dir/att2" --pad 9223372036854775807 "1/2/2000"
contains "$dir/huge_pad.err" "--pad needs an integer in [0, 2^20]"
run 2 nan_lr "$bin" train --lr nan
contains "$dir/nan_lr.err" "--lr needs a number"
# absurd model sizes are refused before anything is allocated
run 1 huge_model "$bin" train "${small[@]}" --out "$dir/huge" --d-model 65536 --heads 1 --ffn 1048576
contains "$dir/huge_model.err" "more than this machine's"
run 1 zero_device "$bin" decode --checkpoint /dev/zero "1/2/2000"
contains "$dir/zero_device.err" "not a regular file"
run 2 heads_divide "$bin" train "${small[@]}" --out "$dir/heads" --d-model 16 --heads 3
contains "$dir/heads_divide.err" "--heads 3 must divide --d-model 16"

# a pair too long for the model names the file, the line and the side
{ cat "$dir/train.tsv"; printf '%s\t2000-01-01\n' "$(printf '1%.0s' $(seq 1 70))"; } >"$dir/long.tsv"
run 1 long_pair "$bin" train "${small[@]}" --train "$dir/long.tsv" --out "$dir/long" --steps 2
contains "$dir/long_pair.err" "long.tsv:401: the source has 70 characters, but --max-len 64"

# resuming from an earlier checkpoint into a directory that went further is refused (the
# later checkpoints would be rotated away); so is resuming another run's checkpoint there
cp -r "$dir/fsize" "$dir/later" && rm -f "$dir/later/.lock"
run 0 later_run "$bin" train "${small[@]}" --out "$dir/later" --steps 30 --resume auto --keep 5
# a checkpoint whose name gives another step than it holds (a copy) is refused, auto or
# named: nothing is written, nothing rotated away
cp "$dir/later/ckpt-00000010.h5" "$dir/later/ckpt-00000090.h5"
listing=$(ls -l --time-style=full-iso "$dir/later")
for how in auto "$dir/later/ckpt-00000090.h5"; do
  run 1 misnamed "$bin" train "${small[@]}" --out "$dir/later" --steps 100 --resume "$how" --keep 1
  contains "$dir/misnamed.err" "'$dir/later/ckpt-00000090.h5' is named for step 90 but holds step 10"
  [ "$(ls -l --time-style=full-iso "$dir/later")" = "$listing" ] || fail "a misnamed checkpoint's resume changed $dir/later"
done
rm "$dir/later/ckpt-00000090.h5"
run 1 rollback "$bin" train "${small[@]}" --out "$dir/later" --steps 20 --resume "$dir/later/ckpt-00000010.h5" --keep 1
contains "$dir/rollback.err" "holds checkpoints past step 10 (ckpt-00000020.h5, ckpt-00000030.h5)"
[ -f "$dir/later/ckpt-00000030.h5" ] || fail "a refused rollback removed a later checkpoint"
run 1 foreign "$bin" train "${small[@]}" --out "$dir/later" --steps 50 --resume "$dir/fsize/ckpt-00000010.h5"
contains "$dir/foreign.err" "holds checkpoints of another run"
# a damaged checkpoint numbered past the others is moved aside, so that the run's own
# saves are never rotated away in its favour
cp "$dir/later/ckpt-00000030.h5" "$dir/later/ckpt-00000099.h5"
printf 'junk' | dd of="$dir/later/ckpt-00000099.h5" bs=1 seek=3000 conv=notrunc 2>/dev/null
run 0 damaged_high "$bin" train "${small[@]}" --out "$dir/later" --steps 40 --resume auto --keep 1
contains "$dir/damaged_high.err" "moved it to $dir/later/ckpt-00000099.h5.damaged"
[ -f "$dir/later/ckpt-00000040.h5" ] || fail "the run's newest checkpoint was rotated away: $(ls "$dir/later")"
contains "$dir/damaged_high.out" "checkpoint: $dir/later/ckpt-00000040.h5"
# set aside again under the same number: the first one's bytes are kept
cp "$dir/later/ckpt-00000099.h5.damaged" "$dir/later/ckpt-00000099.h5"
run 0 damaged_again "$bin" train "${small[@]}" --out "$dir/later" --steps 40 --resume auto --keep 1
contains "$dir/damaged_again.err" "moved it to $dir/later/ckpt-00000099.h5.damaged-2"
cmp -s "$dir/later/ckpt-00000099.h5.damaged" "$dir/later/ckpt-00000099.h5.damaged-2" ||
  fail "the first damaged copy was overwritten"
rm "$dir/later/ckpt-00000099.h5.damaged-2"
# a directory whose every checkpoint is damaged: refused, and refused again on the next try
# (not started afresh among the damaged ones)
mkdir -p "$dir/all_damaged" && head -c 3000 "$dir/later/ckpt-00000040.h5" >"$dir/all_damaged/ckpt-00000040.h5"
run 1 all_damaged "$bin" train "${small[@]}" --out "$dir/all_damaged" --steps 50 --resume auto
contains "$dir/all_damaged.err" "none of the 1 checkpoints in '$dir/all_damaged' is intact"
run 1 all_damaged_again "$bin" train "${small[@]}" --out "$dir/all_damaged" --steps 50 --resume auto
contains "$dir/all_damaged_again.err" "holds no intact checkpoint, only damaged ones set aside (ckpt-00000040.h5.damaged)"
# nothing to train: the checkpoint is already at --steps, and no save happens
run 0 nothing "$bin" train "${small[@]}" --out "$dir/later" --steps 40 --resume auto
contains "$dir/nothing.out" "nothing to train: the checkpoint is at step 40"
grep -q "^saved" "$dir/nothing.out" && fail "a run with nothing to train saved a checkpoint"

# the reader of the output goes away (SIGPIPE): the run saves and stops with 141
( "$bin" train "${small[@]}" --out "$dir/pipe" --steps 100000 --save-every 100000 --log-every 1 2>"$dir/pipe.err"
  echo $? >"$dir/pipe.code" ) | head -n 3 >/dev/null
[ "$(cat "$dir/pipe.code")" = 141 ] || fail "SIGPIPE: exit $(cat "$dir/pipe.code"), expected 141"
ls "$dir/pipe"/ckpt-*.h5 >/dev/null 2>&1 || fail "SIGPIPE saved no checkpoint"

# a thread count from the environment is checked like --threads
OMP_NUM_THREADS=100000 "$bin" train --steps 1 >"$dir/omp.out" 2>"$dir/omp.err"
[ $? -eq 2 ] || fail "OMP_NUM_THREADS=100000 should exit 2"
contains "$dir/omp.err" "OMP_NUM_THREADS needs an integer in [1, 1024]"
run 2 lr_zero "$bin" train "${small[@]}" --out "$dir/lr0" --lr 0
contains "$dir/lr_zero.err" "--lr needs a number in (0, 1e+300], got \"0\""
# --help shows the range the check holds to
run 0 lr_help "$bin" train --help
contains "$dir/lr_help.out" "NUMBER in (0, 1e+300]"
run 2 empty_path "$bin" train --train ""
contains "$dir/empty_path.err" "--train needs a non-empty value"

# decode: endless or unreadable input and unwritable output are errors, not silence
good="$dir/later/ckpt-00000040.h5"
run 1 decode_zero timeout 60 "$bin" decode --checkpoint "$good" </dev/zero
contains "$dir/decode_zero.err" "longer than 1048576 bytes"
run 1 decode_dir "$bin" decode --checkpoint "$good" <"$dir"
contains "$dir/decode_dir.err" "cannot read standard input"
if [ -w /dev/full ]; then
  "$bin" decode --checkpoint "$good" "1/2/2000" >/dev/full 2>"$dir/decode_full.err"
  [ $? -eq 1 ] || fail "decode to /dev/full should exit 1"
  contains "$dir/decode_full.err" "No space left on device"
  # every command's output, --help's too: output that cannot be written is a failure
  "$bin" eval --checkpoint "$good" --data "$dir/valid.tsv" >/dev/full 2>"$dir/eval_full.err"
  [ $? -eq 1 ] || fail "eval to /dev/full should exit 1"
  contains "$dir/eval_full.err" "translate: cannot write standard output"
  "$bin" --help >/dev/full 2>"$dir/help_full.err"
  [ $? -eq 1 ] || fail "--help to /dev/full should exit 1"
  contains "$dir/help_full.err" "cannot write standard output"
fi
run 2 out_option "$bin" train "${small[@]}" --out --steps 5
contains "$dir/out_option.err" '--out needs a value, got the option "--steps"'
[ ! -e ./--steps ] || fail "--out --steps made a directory named --steps"
"$bin" --help >&- 2>"$dir/help_closed.err"
[ $? -eq 1 ] || fail "--help with standard output closed should exit 1"
contains "$dir/help_closed.err" "cannot write standard output"
# eval: an expected output the model cannot write counts as a mistake
{ head -n 3 "$dir/valid.tsv"; printf '1/2/2000\t2000-01-02Z\n'; } >"$dir/odd_target.tsv"
run 0 eval_odd "$bin" eval --checkpoint "$good" --data "$dir/odd_target.tsv"
contains "$dir/eval_odd.out" "4 pairs"
run 2 heads_help "$bin" train "${small[@]}" --out "$dir/h3" --d-model 16 --heads 3
contains "$dir/heads_help.err" "Run 'translate train --help'"

# an old checkpoint that cannot be removed (here a directory in its place) is named in a
# warning; the save stands and training goes on
run 0 keep_base "$bin" train "${small[@]}" --out "$dir/keep" --steps 4 --eval-every 100
mkdir -p "$dir/keep/ckpt-00000002.h5/inside"
run 0 keep_fail "$bin" train "${small[@]}" --out "$dir/keep" --steps 6 --eval-every 100 --resume auto --keep 1
contains "$dir/keep_fail.err" "cannot remove the old checkpoint $dir/keep/ckpt-00000002.h5: Directory not empty"
[ -f "$dir/keep/ckpt-00000006.h5" ] && [ ! -e "$dir/keep/ckpt-00000004.h5" ] || fail "keep_fail: the series is not {6}"

# --help for the program and every command
for cmd in "" train eval decode attention; do
  run 0 "help_${cmd:-top}" "$bin" $cmd --help
  contains "$dir/help_${cmd:-top}.out" "Usage:"
done
run 0 help_word "$bin" help
run 2 unknown_cmd "$bin" trian
contains "$dir/unknown_cmd.err" 'unknown command "trian"'
run 2 no_cmd "$bin"
contains "$dir/no_cmd.err" "translate: a command is needed: train, eval, decode, attention or watch"
run 2 no_checkpoint "$bin" eval --data "$dir/valid.tsv"
contains "$dir/no_checkpoint.err" "translate eval: --checkpoint is required: the checkpoint"
run 2 decay_before_warmup "$bin" train "${small[@]}" --out "$dir/decay" --schedule cosine --decay-steps 10 --warmup 100
contains "$dir/decay_before_warmup.err" "translate train: --decay-steps (10) must be larger than --warmup (100)"
run 2 switch_value "$bin" train --watch=maybe
contains "$dir/switch_value.err" 'translate train: --watch is a switch and takes no value, got "maybe"'
for command in train eval decode attention watch; do
  options_need_values "translate_$command" "$bin" "$command"
done

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all translate checks passed"
