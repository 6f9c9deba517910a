#!/usr/bin/env bash
# A stop is saved whatever becomes of standard output. translate train writes a progress
# line every step here, to a reader that has stopped reading before the stop signal:
# - one process, its output a pipe nobody reads, full before training starts;
# - one process, its standard error such a pipe, and a warning to write there;
# - under mpirun (when MPIEXEC is given), SIGTERM to mpirun: mpirun stops reading the
#   ranks' output (rank 0's is a terminal) as it shuts the job down, sends SIGTERM to the
#   ranks odls_base_sigkill_timeout seconds later and SIGKILL as long again after that.
# Each time exactly one checkpoint must be saved, the stop's, and every process must end.
#   translate_stop_output.sh TRANSLATE DATA_DIR SCRATCH_DIR [MPIEXEC]
set -uo pipefail
bin=$1 data=$2 dir=$3 mpiexec=${4:-}
rm -rf "$dir" && mkdir -p "$dir"
. "$(dirname "$0")/cli_checks.sh"
export OMP_NUM_THREADS=1

head -n 600 "$data/train.tsv" >"$dir/train.tsv"
head -n 60 "$data/valid.tsv" >"$dir/valid.tsv"
small=(--train "$dir/train.tsv" --valid "$dir/valid.tsv" --d-model 16 --heads 2 --enc-layers 1 --dec-layers 1
       --ffn 32 --batch 24 --steps 1000000 --save-every 1000000 --log-every 1 --threads 1)

# wait_gone PID SECONDS: whether PID ended within SECONDS (it is killed otherwise)
wait_gone() {
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null
  return 1
}
# stops_at_sigterm PID WHAT: SIGTERM to PID ends it within 10 s with exit 143 (WHAT, a
# full pipe, names what nobody reads)
stops_at_sigterm() {
  kill -TERM "$1"
  if wait_gone "$1" 10; then
    wait "$1"
    local code=$?
    [ "$code" -eq 143 ] || fail "stopped with a full pipe for $2: exit $code, expected 143"
  else
    fail "translate train still runs 10 s after SIGTERM with a full pipe for $2"
  fi
}
# one_checkpoint OUT: OUT holds exactly one checkpoint, and it reads back
one_checkpoint() {
  local all
  all=$(ls "$1"/ckpt-*.h5 2>/dev/null)
  if [ "$(echo "$all" | grep -c .)" -ne 1 ]; then
    fail "$1: expected the stop's checkpoint alone, got: $(ls "$1" | tr '\n' ' ')"
    return
  fi
  run 0 "$(basename "$1")_eval" "$bin" eval --checkpoint "$all" --data "$dir/valid.tsv" --show 0
}

# --- one process, standard output a full pipe that nobody reads
mkfifo "$dir/one.fifo"
exec 3<>"$dir/one.fifo"  # the reader that never reads
dd if=/dev/zero of=/dev/fd/3 bs=4096 count=1024 oflag=nonblock status=none 2>/dev/null
"$bin" train "${small[@]}" --eval-every 10 --out "$dir/one" >"$dir/one.fifo" 2>"$dir/one.err" &
pid=$!
for _ in $(seq 150); do [ -f "$dir/one/curves.png" ] && break; sleep 0.1; done
[ -f "$dir/one/curves.png" ] || fail "no step 10 after 15 s: training waits for standard output"
stops_at_sigterm "$pid" "standard output"
one_checkpoint "$dir/one"
exec 3>&-

# --- one process, standard error a full pipe that nobody reads, and a warning to write on
# it at step 10 (curves.png cannot be written: it is a directory)
mkfifo "$dir/err.fifo"
exec 3<>"$dir/err.fifo"
dd if=/dev/zero of=/dev/fd/3 bs=4096 count=1024 oflag=nonblock status=none 2>/dev/null
mkdir -p "$dir/err/curves.png"
"$bin" train "${small[@]}" --eval-every 10 --out "$dir/err" >"$dir/err.out" 2>"$dir/err.fifo" &
pid=$!
for _ in $(seq 150); do grep -q "^step 12/" "$dir/err.out" && break; sleep 0.1; done
grep -q "^step 12/" "$dir/err.out" || fail "no step 12 after 15 s: training waits for standard error"
stops_at_sigterm "$pid" "standard error"
one_checkpoint "$dir/err"
exec 3>&-

# --- SIGTERM to mpirun. mpirun is stopped for 2 s first, so that rank 0's terminal is full
# when mpirun stops reading it for good.
if [ -n "$mpiexec" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  "$mpiexec" --oversubscribe --mca odls_base_sigkill_timeout 3 -np 2 "$bin" train "${small[@]}" --eval-every 1000000 \
    --out "$dir/job" >"$dir/job.out" 2>"$dir/job.err" &
  job=$!
  for _ in $(seq 300); do grep -q "^step 20/" "$dir/job.out" && break; sleep 0.1; done
  kill -STOP "$job"
  sleep 2
  kill -TERM "$job"
  kill -CONT "$job"
  if wait_gone "$job" 30; then
    wait "$job"
    [ $? -ne 0 ] || fail "a job stopped by SIGTERM exited 0"
  else
    fail "the job still runs 30 s after SIGTERM to mpirun"
  fi
  [ -z "$(pgrep -f -- "--out $dir/job")" ] || fail "a rank outlived the job"
  one_checkpoint "$dir/job"
fi

[ "$failures" -eq 0 ] && echo "all translate_stop_output checks passed"
exit $((failures > 0))
