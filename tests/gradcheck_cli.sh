#!/usr/bin/env bash
# The gradcheck command: every op and layer it lists passes, at default and at other
# shapes, on contiguous and non-contiguous inputs and under each mask; the self-test op
# with a wrong backward fails with exit 1; bad names and impossible shapes exit 2.
#   gradcheck_cli.sh GRADCHECK_BINARY SCRATCH_DIR
set -uo pipefail
bin=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
n=0
expect() {  # EXIT ARGS...
  local want=$1
  shift
  n=$((n + 1))
  "$bin" "$@" >"$dir/$n.out" 2>"$dir/$n.err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "gradcheck $*: exit $got, expected $want"
    cat "$dir/$n.out" "$dir/$n.err" | head -40
  fi
}

"$bin" --list >"$dir/list.txt" || fail "--list"
names=$(sed -n '/^what gradcheck can check/,/^self-test/p' "$dir/list.txt" | awk 'NR > 1 && /^  / { print $1 }')
[ "$(echo "$names" | wc -w)" -ge 11 ] || fail "--list names fewer than 11 checks: $names"
for name in $names; do
  expect 0 "$name"
  expect 0 "$name" --noncontiguous --batch 3 --L 4 --S 6 --embed 12 --heads 3
done
for mask in none padding causal full-row; do
  expect 0 multihead_attention --kdim 10 --vdim 6 --L 4 --S 7 --heads 3 --embed 12 --mask "$mask"
  expect 0 scaled_dot_product_attention --L 3 --S 5 --mask "$mask" --noncontiguous
  expect 0 masked_fill --mask "$mask"
done
expect 0 encoder_layer --mask padding
expect 0 encoder_layer --mask causal
expect 0 decoder_layer --mask padding --S 7
expect 0 cross_entropy --smoothing 0.1
expect 0 softmax --dim 1
grep -q "float32 drift" "$dir/1.out" || fail "no float32 drift table"
grep -q "PASSED" "$dir/1.out" || fail "no PASSED line"

expect 1 broken_square
grep -q "FAIL" "$dir/$n.out" || fail "broken_square printed no FAIL"
expect 2 no_such_op
grep -q "nothing named 'no_such_op'" "$dir/$n.err" || fail "bad name message"
expect 2 multihead_attention --embed 10 --heads 3
grep -q "multihead\|MultiHeadAttention" "$dir/$n.err" || fail "impossible shape message: $(cat "$dir/$n.err")"
expect 2 softmax --L zero
expect 2 softmax --mask sideways
expect 2 masked_fill --mask sideways
expect 2

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all gradcheck checks passed ($n runs)"
