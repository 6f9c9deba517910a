#!/usr/bin/env bash
# translate train under mpirun, at a tiny size: 2 ranks train as one process does; a
# checkpoint saved by 2 ranks resumes with 1 and with 3; ranks given other options, a
# checkpoint only some see, or two runs' checkpoints of one step stop before training; a
# rank killed mid-step or a rank that fails ends the job within seconds, naming the rank,
# with the last checkpoint intact; SIGTERM to the job saves once and stops every rank
# (translate_stop_output.sh: SIGTERM to mpirun).
#   dist_translate.sh MPIEXEC TRANSLATE DDP_TRAIN DATA_DIR SCRATCH_DIR
set -uo pipefail
mpiexec=$1 bin=$2 ddp=$3 data=$4 dir=$5
rm -rf "$dir" && mkdir -p "$dir"
. "$(dirname "$0")/cli_checks.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi() { "$mpiexec" --oversubscribe -np "$@"; }

# the loss logged at step N in FILE
loss_at() { sed -n "s|^step $2/[0-9]*  loss \([0-9.]*\).*|\1|p" "$1" | tail -1; }
# close A B: relative difference at most 2e-3 (float32 sums in another order, 30 steps)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 2e-3 * b) }'; }

head -n 600 "$data/train.tsv" >"$dir/train.tsv"
head -n 60 "$data/valid.tsv" >"$dir/valid.tsv"
small=(--train "$dir/train.tsv" --valid "$dir/valid.tsv" --d-model 16 --heads 2 --enc-layers 1 --dec-layers 1
       --ffn 32 --batch 24 --eval-every 15 --save-every 15 --keep 5 --log-every 5 --threads 1)

# --- 2 ranks == 1 process (dropout on: the masks follow the rows)
run 0 one "$bin" train "${small[@]}" --out "$dir/one" --steps 30
run 0 two mpi 2 "$bin" train "${small[@]}" --out "$dir/two" --steps 30 --check-every 5
contains "$dir/two.out" "communication: "
contains "$dir/two.out" "2 processes x 1 thread(s) each"
contains "$dir/two.out" "step 30/30"
contains "$dir/two.out" "validation exact match"
[ "$(grep -c '^step 30/30' "$dir/two.out")" -eq 1 ] || fail "progress printed by more than rank 0"
a=$(loss_at "$dir/one.out" 30) b=$(loss_at "$dir/two.out" 30)
close "$b" "$a" || fail "2 ranks' loss at step 30 is $b, one process's $a"
# the validation accuracy, decoded in two halves, is the one process's
grep "^step 30: validation" "$dir/one.out" | cut -d'(' -f1 >"$dir/one.acc"
grep "^step 30: validation" "$dir/two.out" | cut -d'(' -f1 >"$dir/two.acc"
cmp -s "$dir/one.acc" "$dir/two.acc" || fail "validation differs: $(cat "$dir/one.acc") vs $(cat "$dir/two.acc")"

# --- saved by 2 ranks at step 15, resumed with 1 and with 3 ranks
for n in 1 3; do
  mkdir -p "$dir/resume$n" && cp "$dir/two/ckpt-00000015.h5" "$dir/resume$n/"
  run 0 "resume$n" mpi "$n" "$bin" train "${small[@]}" --out "$dir/resume$n" --steps 30 --resume auto
  contains "$dir/resume$n.out" "saved by 2 process(es)"
  c=$(loss_at "$dir/resume$n.out" 30)
  close "$c" "$b" || fail "resumed with $n rank(s): loss at step 30 is $c, uninterrupted $b"
done

# --- processes that disagree (another --steps, a checkpoint only one of them sees) stop
# before training, naming the rank
run 1 disagree timeout 60 "$mpiexec" --oversubscribe -np 1 "$bin" train "${small[@]}" --out "$dir/dis" --steps 30 \
  : -np 1 "$bin" train "${small[@]}" --out "$dir/dis" --steps 20
contains "$dir/disagree.err" "of rank(s) 1 differ from rank 0's"
mkdir -p "$dir/seen" "$dir/unseen" && cp "$dir/two/ckpt-00000015.h5" "$dir/seen/"
run 1 unseen timeout 60 "$mpiexec" --oversubscribe -np 1 "$bin" train "${small[@]}" --out "$dir/seen" --steps 30 --resume auto \
  : -np 1 "$bin" train "${small[@]}" --out "$dir/unseen" --steps 30 --resume auto
contains "$dir/unseen.err" "options, data files or checkpoint (here: none) of rank(s) 1 differ from rank 0's"
# two runs' checkpoints of one step (another --seed): options, data and step agree, the
# contents do not; the ranks refuse before the first step, naming what differs
for seed in 1 2; do run 0 "seed$seed" "$bin" train "${small[@]}" --out "$dir/seed$seed" --steps 5 --seed $seed; done
run 1 mixed timeout 60 "$mpiexec" --oversubscribe \
  -np 1 "$bin" train "${small[@]}" --out "$dir/seed1" --steps 10 --resume "$dir/seed1/ckpt-00000005.h5" \
  : -np 1 "$bin" train "${small[@]}" --out "$dir/seed2" --steps 10 --resume "$dir/seed2/ckpt-00000005.h5"
contains "$dir/mixed.err" "the parameters, optimizer state, data order and dropout stream of rank(s) 1 differ from rank 0's"
[ -z "$(ls "$dir"/seed[12]/ckpt-00000010.h5 2>/dev/null)" ] || fail "ranks that resumed other checkpoints trained"

# --- a rank killed mid-step: the job ends within seconds, the checkpoints read back
long=("${small[@]}" --steps 100000 --save-every 10)
"$mpiexec" --oversubscribe -np 2 "$bin" train "${long[@]}" --out "$dir/killed" >"$dir/killed.out" 2>"$dir/killed.err" &
job=$!
for _ in $(seq 600); do [ -f "$dir/killed/ckpt-00000020.h5" ] && break; sleep 0.1; done
victim=""
for p in $(pgrep -f -- "--out $dir/killed"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
done
if [ -z "$victim" ]; then
  fail "no rank 1 to kill"
  kill "$job"
else
  kill -9 "$victim"
  start=$SECONDS
  for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then fail "the job still runs 30 s after rank 1 was killed"; kill -9 "$job"; fi
  wait "$job"
  code=$?
  [ "$code" -ne 0 ] || fail "the job exited 0 after rank 1 was killed"
  grep -q "rank 1" "$dir/killed.err" "$dir/killed.out" || fail "the job's message does not name rank 1"
  echo "the job ended $((SECONDS - start)) s after rank 1 was killed (exit $code)"
  newest=$(ls "$dir/killed"/ckpt-*.h5 | tail -1)
  run 0 killed_eval "$bin" eval --checkpoint "$newest" --data "$dir/valid.tsv"
fi

# --- a rank that fails ends the job at once, naming itself (the others wait in a collective)
run 1 raise timeout 60 "$mpiexec" --oversubscribe -np 2 "$ddp" raise
contains "$dir/raise.err" "rank 1: raise_on_last_rank: a failure on purpose"

# --- SIGTERM to the job: rank 0 saves once, every rank stops
"$mpiexec" --oversubscribe -np 2 "$bin" train "${long[@]}" --save-every 100000 --out "$dir/term" >"$dir/term.out" \
  2>"$dir/term.err" &
job=$!
for _ in $(seq 600); do grep -q "^step 10/" "$dir/term.out" && break; sleep 0.1; done
kill -TERM "$job"
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then fail "the job still runs 30 s after SIGTERM"; kill -9 "$job"; fi
wait "$job"
[ $? -ne 0 ] || fail "a stopped job exited 0"
contains "$dir/term.out" "stopped by SIGTERM"
[ "$(ls "$dir/term"/ckpt-*.h5 2>/dev/null | wc -l)" -eq 1 ] || fail "expected one checkpoint, got: $(ls "$dir/term")"
[ -z "$(pgrep -f -- "--out $dir/term")" ] || fail "a rank outlived the job"
run 0 term_resume "$bin" train "${small[@]}" --out "$dir/term" --steps 5 --resume auto
contains "$dir/term_resume.out" "nothing to train"

[ "$failures" -eq 0 ] && echo "all dist_translate checks passed"
exit $((failures > 0))
