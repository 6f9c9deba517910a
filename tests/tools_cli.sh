#!/usr/bin/env bash
# make_dates, attention_probe and the benchmark programs on bad input: every refused
# option exits 2 naming the option and its range, every bad file exits 1 naming the file
# and the system's reason, nothing hangs or aborts, and a failed make_dates leaves the
# files that were there untouched. The benchmarks are only asked for --help and refused
# options: none of them runs a benchmark here.
#   tools_cli.sh MAKE_DATES ATTENTION_PROBE BENCH_DIR TEST_DATA_DIR SCRATCH_DIR
set -uo pipefail
make_dates=$1 probe=$2 bench=$3 data=$4 dir=$5
rm -rf "$dir" && mkdir -p "$dir"
. "$(dirname "$0")/cli_checks.sh"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
contains() { grep -qF -- "$2" "$1" || { fail "$1 lacks '$2'"; head -20 "$1"; }; }
lacks() { ! grep -qF -- "$2" "$1" || { fail "$1 has '$2'"; head -20 "$1"; }; }
# expect CODE NAME COMMAND...: runs the command (at most 20 s) into $dir/NAME.out and checks its exit code
expect() {
  local code=$1 name=$2
  shift 2
  timeout 20 "$@" >"$dir/$name.out" 2>&1
  local rc=$?
  [ "$rc" -eq "$code" ] || { fail "$name: exit $rc, expected $code: $*"; head -20 "$dir/$name.out"; }
}
sums() { (cd "$1" && md5sum train.tsv valid.tsv test.tsv 2>&1); }
# root may write anywhere: it checks "unwritable" as nobody
nobody=()
[ "$(id -u)" -eq 0 ] && nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups)

# ---- make_dates
expect 0 md_help "$make_dates" --help
contains "$dir/md_help.out" "Usage: make_dates"
contains "$dir/md_help.out" "--train INT in [0, 73049]"
out=$dir/dates
expect 0 md_small "$make_dates" --out "$out" --train 16 --valid 8 --test 8 --seed 5
for split in train:16 valid:8 test:8; do
  [ "$(wc -l <"$out/${split%%:*}.tsv")" -eq "${split##*:}" ] || fail "make_dates wrote the wrong number of $split pairs"
done
before=$(sums "$out")
expect 2 md_huge "$make_dates" --out "$out" --train 99999999999999999999999
contains "$dir/md_huge.out" '--train needs an integer in [0, 73049], got "99999999999999999999999"'
expect 2 md_overflow "$make_dates" --out "$out" --train 9223372036854775807 --valid 9223372036854775807 --test 2
contains "$dir/md_overflow.out" "--train needs an integer in [0, 73049]"
expect 2 md_total "$make_dates" --out "$out" --train 73000 --valid 40 --test 10
contains "$dir/md_total.out" "ask for 73050 dates in all (73000 + 40 + 10); there are only 73049"
for bad in -1 abc 1e3 0x10 " 5" nan inf ""; do
  expect 2 md_seed "$make_dates" --out "$out" --seed "$bad"
  contains "$dir/md_seed.out" "--seed needs an integer in [0, 2^63-1]"
done
expect 2 md_valid "$make_dates" --out "$out" --valid -5
contains "$dir/md_valid.out" '--valid needs an integer in [0, 73049], got "-5"'
expect 2 md_unknown "$make_dates" --out "$out" --frobnicate 3
contains "$dir/md_unknown.out" "unknown option"
[ "$(sums "$out")" = "$before" ] || fail "a refused make_dates changed $out"
# an --out under a regular file, and a split's name taken by a directory
echo x >"$dir/plain"
expect 1 md_notdir "$make_dates" --out "$dir/plain/sub"
contains "$dir/md_notdir.out" "Not a directory"
mkdir -p "$dir/taken" && cp "$out"/*.tsv "$dir/taken/" && rm "$dir/taken/valid.tsv" && mkdir "$dir/taken/valid.tsv"
expect 1 md_taken "$make_dates" --out "$dir/taken"
contains "$dir/md_taken.out" "$dir/taken/valid.tsv"
contains "$dir/md_taken.out" "is a directory"
cmp -s "$dir/taken/train.tsv" "$out/train.tsv" || fail "a failed make_dates replaced train.tsv"
# a write that fails half way (a file-size limit, as a full disk would): the old files stay
( trap '' XFSZ; ulimit -f 100; exec "$make_dates" --out "$out" ) >"$dir/md_full.out" 2>&1
[ $? -eq 1 ] || fail "make_dates under a 100 KB file-size limit should exit 1"
contains "$dir/md_full.out" "File too large"
contains "$dir/md_full.out" "$out/"
[ "$(sums "$out")" = "$before" ] || fail "a failed make_dates changed $out"
[ -z "$(ls -A "$out" | grep -v '^\(train\|valid\|test\)\.tsv$')" ] || fail "a failed make_dates left files in $out: $(ls -A "$out")"
# a directory it may not write into
mkdir -p "$dir/locked" && chmod 555 "$dir/locked"
expect 1 md_locked "${nobody[@]}" "$make_dates" --out "$dir/locked"
contains "$dir/md_locked.out" "Permission denied"
chmod 755 "$dir/locked"

# ---- attention_probe
case_file=$data/mha_self_textbook.h5
expect 0 ap_help "$probe" --help
contains "$dir/ap_help.out" "Usage: attention_probe"
expect 0 ap_ok "$probe" "$case_file" "$dir/probe.h5" --dtype float32
contains "$dir/ap_ok.out" "all tensors match"
expect 2 ap_none "$probe"
contains "$dir/ap_none.out" "attention_probe: CASE.h5 is required: the case (tests/data/README.md"
expect 2 ap_dtype_none "$probe" "$case_file" "$dir/probe.h5" --dtype
contains "$dir/ap_dtype_none.out" "attention_probe: --dtype needs a value: float64 or float32"
lacks "$dir/ap_dtype_none.out" "required"
options_need_values attention_probe "$probe"
options_need_values make_dates "$make_dates"
expect 2 ap_dtype "$probe" "$case_file" "$dir/probe.h5" --dtype float16
contains "$dir/ap_dtype.out" '--dtype needs float64 or float32, got "float16"'
expect 2 ap_extra "$probe" "$case_file" "$dir/probe.h5" extra
contains "$dir/ap_extra.out" "unexpected argument"
expect 1 ap_missing "$probe" "$dir/nope.h5" "$dir/probe.h5"
contains "$dir/ap_missing.out" "cannot open '$dir/nope.h5': No such file or directory"
expect 1 ap_dir "$probe" "$dir" "$dir/probe.h5"
contains "$dir/ap_dir.out" "attention_probe: '$dir' is a directory, not a regular file; expected an HDF5 case file"
expect 1 ap_text "$probe" "$dir/plain" "$dir/probe.h5"
contains "$dir/ap_text.out" "'$dir/plain' as an HDF5 file"
mkfifo "$dir/fifo.h5"
expect 1 ap_fifo "$probe" "$dir/fifo.h5" "$dir/probe.h5"
contains "$dir/ap_fifo.out" "attention_probe: '$dir/fifo.h5' is a FIFO, not a regular file"
expect 1 ap_zero "$probe" /dev/zero "$dir/probe.h5"
contains "$dir/ap_zero.out" "attention_probe: '/dev/zero' is a character device, not a regular file"
expect 1 ap_kind "$probe" "$data/adam.h5" "$dir/probe.h5"
contains "$dir/ap_kind.out" "'$data/adam.h5': attribute 'kind' must be \"multihead_attention\", got \"adam\""
python=${PYTHON:-/usr/bin/python3}
if "$python" -c "import h5py" 2>/dev/null; then
  for schema in 2 none; do
    cp "$case_file" "$dir/schema.h5"
    "$python" -c "
import sys, h5py
with h5py.File(sys.argv[1], 'r+') as f:
    del f.attrs['schema']
    if sys.argv[2] != 'none': f.attrs['schema'] = int(sys.argv[2])
" "$dir/schema.h5" "$schema"
    expect 1 ap_schema "$probe" "$dir/schema.h5" "$dir/probe.h5"
    if [ "$schema" = none ]; then
      contains "$dir/ap_schema.out" "'$dir/schema.h5' has no root attribute 'schema' (expected an integer in [0, 1073741824])"
    else
      contains "$dir/ap_schema.out" "'$dir/schema.h5': attribute 'schema' is 2; this program reads schema 1"
    fi
  done
  # expected values stored as integers are compared as numbers (rounded: a mismatch), not refused by an inner op
  cp "$case_file" "$dir/ints.h5"
  "$python" -c "
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], 'r+') as f:
    v = f['expected/output'][()]
    del f['expected/output']
    f['expected/output'] = np.round(v).astype(np.int64)
" "$dir/ints.h5"
  expect 1 ap_ints "$probe" "$dir/ints.h5" "$dir/probe.h5"
  contains "$dir/ap_ints.out" "MISMATCH"
  grep -q "^attn_weights .* ok" "$dir/ap_ints.out" || fail "ap_ints: the weights should still agree"
else
  echo "skipped: the edited-schema check needs python3 with h5py"
fi
expect 1 ap_out_notdir "$probe" "$case_file" "$dir/plain/out.h5"
contains "$dir/ap_out_notdir.out" "'$dir/plain' is not a directory"
expect 1 ap_out_dir "$probe" "$case_file" "$dir"
contains "$dir/ap_out_dir.out" "is a directory; expected a file name"
cp "$case_file" "$dir/case.h5"
expect 1 ap_same "$probe" "$dir/case.h5" "$dir/./case.h5"
contains "$dir/ap_same.out" "is the case file itself"
cmp -s "$case_file" "$dir/case.h5" || fail "attention_probe changed its case file"

# ---- the benchmarks: --help and refused options only
if [ -x "$bench/bench_matmul" ] && [ -x "$bench/bench_mha" ] && [ -x "$bench/bench_suite" ]; then
  expect 0 bm_help "$bench/bench_matmul" --help
  contains "$dir/bm_help.out" "--reps INT in [1, 1000000]"
  expect 2 bm_reps "$bench/bench_matmul" --reps 99999999999999999999999
  contains "$dir/bm_reps.out" '--reps needs an integer in [1, 1000000], got "99999999999999999999999"'
  expect 2 bm_threads "$bench/bench_matmul" --threads 2147483648
  contains "$dir/bm_threads.out" '--threads needs an integer in [1, 1024], got "2147483648"'
  expect 2 bm_reps_real "$bench/bench_matmul" --reps 1.5
  contains "$dir/bm_reps_real.out" "--reps needs an integer"
  expect 2 bm_unknown "$bench/bench_matmul" --repz 3
  contains "$dir/bm_unknown.out" "unknown option"
  expect 1 bm_json "$bench/bench_matmul" --json "$dir/plain/m.json"
  contains "$dir/bm_json.out" "'$dir/plain' is not a directory"

  expect 0 bh_help "$bench/bench_mha" --help
  contains "$dir/bh_help.out" "--warmup INT in [0, 1000000]"
  expect 2 bh_runs "$bench/bench_mha" --runs -1
  contains "$dir/bh_runs.out" '--runs needs an integer in [1, 1000000], got "-1"'
  expect 2 bh_warmup "$bench/bench_mha" --warmup nan
  contains "$dir/bh_warmup.out" '--warmup needs an integer in [0, 1000000], got "nan"'
  expect 2 bh_threads "$bench/bench_mha" --threads 2147483648
  contains "$dir/bh_threads.out" "--threads needs an integer in [1, 1024]"
  expect 1 bh_json "$bench/bench_mha" --json "$dir"
  contains "$dir/bh_json.out" "is a directory; expected a file name"

  expect 0 bs_help "$bench/bench_suite" --help
  contains "$dir/bs_help.out" "attn-mem"
  expect 0 bs_help_mem "$bench/bench_suite" attn-mem --help
  expect 2 bs_none "$bench/bench_suite"
  contains "$dir/bs_none.out" "bench_suite: a command is needed: ops, train, attn-mem, hvp, per-sample, curvature, cores, big or sgemm"
  expect 2 bs_mem_none "$bench/bench_suite" attn-mem
  contains "$dir/bs_mem_none.out" "bench_suite attn-mem: L is required: an integer in [1, 65536]"
  options_need_values bench_matmul "$bench/bench_matmul"
  options_need_values bench_mha "$bench/bench_mha"
  options_need_values bench_suite "$bench/bench_suite"
  for command in ops train big sgemm; do
    options_need_values "bench_suite_$command" "$bench/bench_suite" "$command"
  done
  expect 2 bs_command "$bench/bench_suite" frobnicate
  contains "$dir/bs_command.out" "unknown command"
  for bad in 0 -3 99999999999999999999 1e3 65537 x; do
    expect 2 bs_len "$bench/bench_suite" attn-mem "$bad"
    contains "$dir/bs_len.out" "L needs an integer in [1, 65536]"
  done
  expect 2 bs_precision "$bench/bench_suite" big --precision fp16
  contains "$dir/bs_precision.out" 'bench_suite big: --precision needs fp32 or bf16, got "fp16"'
  for bad in 0 1001 -1 x; do
    expect 2 bs_steps "$bench/bench_suite" big --steps "$bad"
    contains "$dir/bs_steps.out" "bench_suite big: --steps needs an integer in [1, 1000]"
  done
  expect 2 bs_shape "$bench/bench_suite" sgemm --shape huge
  contains "$dir/bs_shape.out" 'bench_suite sgemm: --shape needs date or big, got "huge"'
  expect 1 bs_big_json "$bench/bench_suite" big --json "$dir/plain/b.json"
  contains "$dir/bs_big_json.out" "'$dir/plain' is not a directory"
  expect 2 bs_threads "$bench/bench_suite" ops --threads 2147483648
  contains "$dir/bs_threads.out" "--threads needs an integer in [1, 1024]"
  expect 1 bs_json "$bench/bench_suite" ops --json "$dir/plain/s.json"
  contains "$dir/bs_json.out" "'$dir/plain' is not a directory"
  mkdir -p "$dir/few" && head -5 "$out/train.tsv" >"$dir/few/train.tsv" && cp "$dir/few/train.tsv" "$dir/few/valid.tsv"
  expect 1 bs_few "$bench/bench_suite" train --data "$dir/few"
  contains "$dir/bs_few.out" "'$dir/few/train.tsv' holds 5 pairs; expected at least 64"
  mkdir -p "$dir/dirs/train.tsv"
  expect 1 bs_dirs "$bench/bench_suite" train --data "$dir/dirs"
  contains "$dir/bs_dirs.out" "'$dir/dirs/train.tsv' is a directory"
  lacks "$dir/bs_dirs.out" "empty"
else
  echo "the benchmarks are not built in $bench: their checks are skipped"
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all tools checks passed"
