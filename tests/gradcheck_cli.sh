#!/usr/bin/env bash
# The gradcheck command: every op and layer it lists passes, at default and at other
# shapes, on contiguous and non-contiguous inputs and under each mask, and in forward mode
# (--forward) those whose ops have forward rules; the self-test op
# with a wrong backward fails with exit 1; bad names, bad numbers and impossible shapes
# exit 2, and shapes too large to check end at once with a message, never an abort.
#   gradcheck_cli.sh GRADCHECK_BINARY SCRATCH_DIR
set -uo pipefail
bin=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
export OMP_WAIT_POLICY=PASSIVE
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
n=0
expect() {  # EXIT ARGS...
  local want=$1
  shift
  n=$((n + 1))
  timeout 120 "$bin" "$@" >"$dir/$n.out" 2>"$dir/$n.err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "gradcheck $*: exit $got, expected $want"
    cat "$dir/$n.out" "$dir/$n.err" | head -40
  fi
}
says() {  # TEXT: the last run's stderr holds TEXT
  grep -qF -- "$1" "$dir/$n.err" || fail "run $n: stderr lacks '$1': $(head -c 600 "$dir/$n.err")"
}

"$bin" --list >"$dir/list.txt" || fail "--list"
names=$(sed -n '/^what gradcheck can check/,/^self-test/p' "$dir/list.txt" | awk 'NR > 1 && /^  / { print $1 }')
[ "$(echo "$names" | wc -w)" -ge 11 ] || fail "--list names fewer than 11 checks: $names"
for name in $names; do
  expect 0 "$name"
  expect 0 "$name" --noncontiguous --batch 3 --L 4 --S 6 --embed 12 --heads 3
  expect 0 "$name" --second-order
  grep -q "gradgradcheck PASSED" "$dir/$n.out" || fail "$name --second-order printed no second-order report"
done
for mask in none padding causal full-row; do
  expect 0 multihead_attention --kdim 10 --vdim 6 --L 4 --S 7 --heads 3 --embed 12 --mask "$mask"
  expect 0 multihead_attention --kdim 10 --vdim 6 --L 4 --S 7 --heads 3 --embed 12 --mask "$mask" --second-order
  expect 0 scaled_dot_product_attention --L 3 --S 5 --mask "$mask" --noncontiguous
  expect 0 scaled_dot_product_attention --L 3 --S 5 --mask "$mask" --noncontiguous --second-order
  expect 0 masked_fill --mask "$mask"
done
expect 0 encoder_layer --mask padding
expect 0 encoder_layer --mask causal
expect 0 encoder_layer --mask padding --second-order
expect 0 decoder_layer --mask padding --S 7
expect 0 decoder_layer --mask causal --S 7 --second-order
expect 0 cross_entropy --smoothing 0.1
expect 0 softmax --dim 1
grep -q "float32 drift" "$dir/1.out" || fail "no float32 drift table"
grep -q "PASSED" "$dir/1.out" || fail "no PASSED line"

# --forward: forward mode too, a "(forward)" row after each input's, for every check whose
# ops all have forward rules
for name in softmax log_softmax masked_fill layer_norm linear embedding cross_entropy; do
  expect 0 "$name" --forward
  grep -q "gradcheck PASSED (.*, forward mode too)" "$dir/$n.out" || fail "$name --forward printed no forward note"
  grep -q "(forward) .* ok " "$dir/$n.out" || fail "$name --forward printed no forward row"
done
expect 0 layer_norm --forward --noncontiguous --batch 3 --L 2 --embed 6
expect 0 cross_entropy --forward --smoothing 0.1 --noncontiguous
expect 0 softmax --forward --second-order
grep -q "gradgradcheck PASSED" "$dir/$n.out" || fail "softmax --forward --second-order printed no second-order report"
grep -q "grad_output (forward) .* ok " "$dir/$n.out" || fail "softmax --forward --second-order checked no forward over reverse"
# attention and the layers: forward mode, and forward over reverse with --second-order
expect 0 multihead_attention --forward --second-order --mask causal --kdim 10 --vdim 6 --L 4 --S 7 --heads 3 --embed 12
grep -q "grad_output (forward) .* ok " "$dir/$n.out" || fail "multihead_attention --forward --second-order checked no forward over reverse"
expect 0 scaled_dot_product_attention --forward --second-order --mask full-row --noncontiguous
expect 0 encoder_layer --forward --mask padding
expect 0 decoder_layer --forward --second-order --mask padding --S 7
expect 0 softmax
grep -q "(forward)" "$dir/$n.out" && fail "softmax without --forward printed a forward row"
# broken_square's backward is wrong and its forward rule right: only the reverse row fails
expect 1 broken_square --forward
grep -q "^  x  .* FAIL " "$dir/$n.out" || fail "broken_square --forward printed no failed reverse row"
grep -q "^  x (forward) .* ok " "$dir/$n.out" || fail "broken_square --forward printed no passed forward row"

expect 1 broken_square
grep -q "FAIL" "$dir/$n.out" || fail "broken_square printed no FAIL"
expect 1 broken_square --second-order
grep -q "gradgradcheck FAILED" "$dir/$n.out" || fail "broken_square --second-order printed no failed second-order report"
expect 2 no_such_op
says 'nothing named "no_such_op"'
expect 2 multihead_attention --embed 10 --heads 3
says "MultiHeadAttention: embed_dim 10 is not divisible by num_heads 3"
expect 2 scaled_dot_product_attention --vdim 10 --heads 4
says "--vdim needs a multiple of --heads 4, got 10"
expect 2 softmax --L zero
says '--L needs an integer in [1, 4096], got "zero"'
expect 2 softmax --mask sideways
says '--mask needs none, padding, causal or full-row, got "sideways"'
expect 2 masked_fill --mask sideways
expect 2
says "a name to check is needed"

# the command line: help, numbers out of range or malformed, unknown options, stray words
expect 0 --help
grep -q "Usage: gradcheck" "$dir/$n.out" || fail "--help printed no usage"
grep -q -- "--mask none|padding|causal|full-row" "$dir/$n.out" || fail "--help lacks --mask's choices"
expect 2 softmax --L 99999999999999999999999
says '--L needs an integer in [1, 4096], got "99999999999999999999999"'
expect 2 softmax --heads 2147483648
says '--heads needs an integer in [1, 4096], got "2147483648"'
expect 2 softmax --L 1000000000
says "--L needs an integer in [1, 4096]"
expect 2 softmax --batch -1
expect 2 softmax --L 1e3
says '--L needs an integer in [1, 4096], got "1e3"'
expect 2 softmax --L 0x10
expect 2 softmax --L ""
expect 2 softmax --dim 3
says '--dim needs an integer in [-3, 2], got "3"'
expect 2 softmax --eps 0
says "--eps needs a number in [1e-12, 1]"
expect 2 softmax --atol nan
says '--atol needs a number in [0, 1], got "nan"'
expect 2 cross_entropy --smoothing 1e400
expect 2 cross_entropy --smoothing 1.5
expect 2 softmax --seed 99999999999999999999999
expect 2 softmax --mask
expect 2 softmax --sideways 3
says "unknown option"
expect 2 softmax stray
says 'unexpected argument "stray"'
expect 2 "$(printf 'soft\tmax')"
says 'nothing named "softU+0009max"'

# --graph draws the checked expression's graph: DOT that Graphviz reads, with the layer's
# inputs, parameters and modules by name
expect 0 multihead_attention --graph "$dir/mha.dot"
grep -q "^digraph" "$dir/mha.dot" || fail "--graph wrote no DOT: $(head -c 300 "$dir/mha.dot")"
for want in 'label="query' 'label="q_proj.weight' 'label="out_proj"' 'grad norm'; do
  grep -qF "$want" "$dir/mha.dot" || fail "--graph's DOT lacks $want"
done
if command -v dot >/dev/null; then
  dot -Tsvg "$dir/mha.dot" -o "$dir/mha_check.svg" || fail "dot refuses the DOT --graph wrote"
  expect 0 softmax --graph "$dir/softmax.svg"
  grep -q "<svg" "$dir/softmax.svg" || fail "--graph FILE.svg wrote no SVG"
fi
expect 2 softmax --graph "$dir/graph.txt"
says "--graph needs a file ending .dot"
expect 1 softmax --graph "$dir/no-such-dir/graph.dot"
says "no-such-dir"

# shapes too large for finite differences: refused before the work, with the reason
start=$SECONDS
expect 1 softmax --L 4096 --S 4096 --batch 4096
says "softmax at these shapes would need about"
says "GB of memory"
expect 1 multihead_attention --L 4096 --S 4096 --batch 64 --embed 4096
says "more than this machine's"
expect 2 softmax --L 1000 --S 1000
says "finite differences are for small shapes"
expect 2 encoder_layer --embed 512 --ffn 2048
says "elements, with 2 evaluations of"
[ $((SECONDS - start)) -le 60 ] || fail "refusing large shapes took $((SECONDS - start)) s"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all gradcheck checks passed ($n runs)"
