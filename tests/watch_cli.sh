#!/usr/bin/env bash
# Watching attention learn, end to end at a tiny size: translate train --watch trains
# bitwise as it does without (the same checkpoint bytes, the same losses), writes
# watch.h5, watch.csv and the figures; watch_plot draws the same figures from watch.h5
# alone; h5py reads the documented layout (when python3 has h5py); a resumed run continues
# the watch; translate watch prints a per-head table; --score-scale is kept in the
# checkpoint and cannot change on resume, and so is --qk-norm; --z-loss 0 is the training
# without it; --precision bf16 (the same bits on 1 and 2 threads, kept on resume);
# tag_dates --watch; bad options, damaged and
# crafted files, and FIFOs, directories and devices where a watch file should be.
#   watch_cli.sh TRANSLATE TAG_DATES WATCH_PLOT DATA_DIR SCRATCH_DIR
set -uo pipefail
bin=$1 tagger=$2 plot=$3 data=$4 dir=$5
rm -rf "$dir" && mkdir -p "$dir"
. "$(dirname "$0")/cli_checks.sh"
export OMP_NUM_THREADS=1
png() { [ "$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 is not a PNG"; }

head -n 600 "$data/train.tsv" >"$dir/train.tsv"
head -n 40 "$data/valid.tsv" >"$dir/valid.tsv"
small=(--train "$dir/train.tsv" --valid "$dir/valid.tsv" --d-model 16 --heads 2 --enc-layers 2 --dec-layers 1
       --ffn 32 --batch 16 --eval-every 20 --save-every 20 --log-every 5 --threads 1 --target-acc 2)

# --- with and without --watch: the same training, bit for bit
run 0 plain "$bin" train "${small[@]}" --out "$dir/plain" --steps 40
run 0 watched "$bin" train "${small[@]}" --out "$dir/watched" --steps 40 --watch --watch-every 10 --watch-rows 12
for step in 00000020 00000040; do
  cmp -s "$dir/plain/ckpt-$step.h5" "$dir/watched/ckpt-$step.h5" || fail "the checkpoints of step $step differ with --watch"
done
grep '^step [0-9]*/' "$dir/plain.out" >"$dir/plain.losses"
grep '^step [0-9]*/' "$dir/watched.out" >"$dir/watched.losses"
cut -d' ' -f1-4 "$dir/plain.losses" >"$dir/a" && cut -d' ' -f1-4 "$dir/watched.losses" >"$dir/b"
cmp -s "$dir/a" "$dir/b" || fail "the logged losses differ with --watch"
[ "$(wc -l <"$dir/a")" -eq 8 ] || fail "expected 8 progress lines, got $(wc -l <"$dir/a")"
contains "$dir/watched.out" "watch: 5 measurements of the first 12 validation pairs, "
for f in watch.h5 watch.csv; do [ -s "$dir/watched/$f" ] || fail "$f was not written"; done
for f in encoder_self decoder_self decoder_cross grad_ratio score_spread example_spread max_logit; do png "$dir/watched/watch_$f.png"; done
# the CSV: a header, then 5 measurements x 3 modules x 2 layers x 2 heads
[ "$(wc -l <"$dir/watched/watch.csv")" -eq $((1 + 5 * 3 * 2 * 2)) ] || fail "watch.csv has $(wc -l <"$dir/watched/watch.csv") lines"
head -1 "$dir/watched/watch.csv" | grep -q '^step,module,layer,head,score_std,' || fail "watch.csv's header"
steps() { tail -n +2 "$1" | cut -d, -f1 | sort -un | tr '\n' ' '; }

# --- curvature: the same training again, every head's Hessian block every 20 steps
run 0 curved "$bin" train "${small[@]}" --out "$dir/curved" --steps 40 --watch --watch-every 10 --watch-rows 12 \
  --watch-curvature 20
cmp -s "$dir/plain/ckpt-00000040.h5" "$dir/curved/ckpt-00000040.h5" || fail "the checkpoint differs with --watch-curvature"
contains "$dir/curved.out" ", curvature every 20 steps "
for f in curvature curvature_trace density; do png "$dir/curved/watch_$f.png"; done
# finite at steps 0, 20 and 40 where a layer exists, NaN at 10 and 30
col=$(head -1 "$dir/curved/watch.csv" | tr ',' '\n' | grep -n '^curvature_top$' | cut -d: -f1)
[ -n "$col" ] || fail "watch.csv has no curvature_top column"
awk -F, -v c="$col" 'NR > 1 && $2 == "encoder_self" { m = ($1 % 20 == 0); if (m != ($c != "nan")) bad = 1 } END { exit bad }' \
  "$dir/curved/watch.csv" || fail "curvature_top is not finite exactly at the curvature steps"
# a run going unstable: products overflow float32, the measurement is NaN with a warning and training goes on
run 0 unstable "$bin" train "${small[@]}" --out "$dir/unstable" --steps 6 --lr 300 --warmup 1 --score-scale 1000 \
  --watch --watch-every 2 --watch-curvature 2 --log-every 1
contains "$dir/unstable.err" "could not be measured (NaN in the watch)"
[ -s "$dir/unstable/ckpt-00000006.h5" ] || fail "the unstable run did not train to its end"
# given alone, the interval whose cost the benchmarks measure
run 0 curvature_default "$bin" train "${small[@]}" --out "$dir/curvature_default" --steps 2 --watch --watch-curvature
contains "$dir/curvature_default.out" ", curvature every 500 steps "
run 2 curvature_alone "$bin" train "${small[@]}" --out "$dir/curvature_alone" --steps 4 --watch-curvature 2
contains "$dir/curvature_alone.err" "--watch-curvature needs --watch"
run 2 curvature_multiple "$bin" train "${small[@]}" --out "$dir/curvature_multiple" --steps 4 --watch --watch-every 10 \
  --watch-curvature 15
contains "$dir/curvature_multiple.err" "--watch-curvature 15 must be a multiple of --watch-every 10"
[ "$(steps "$dir/watched/watch.csv")" = "0 10 20 30 40 " ] || fail "watch.csv's steps: $(steps "$dir/watched/watch.csv")"

# --- the figures again from watch.h5 alone: the same bytes
run 0 redraw "$plot" "$dir/watched/watch.h5" --out "$dir/redrawn"
for f in encoder_self decoder_self decoder_cross grad_ratio score_spread example_spread max_logit; do
  cmp -s "$dir/watched/watch_$f.png" "$dir/redrawn/watch_$f.png" || fail "watch_$f.png drawn from watch.h5 differs"
done
run 0 compare "$plot" "$dir/watched/watch.h5" "$dir/watched/watch.h5" --label a --label b --compare "$dir/both"
png "$dir/both_attention.png"
contains "$dir/compare.out" "| a | decoder_cross |"
run 2 plot_usage "$plot" "$dir/watched/watch.h5"
contains "$dir/plot_usage.err" "give either --out DIR (one run) or --compare PREFIX"
run 1 plot_not_watch "$plot" "$dir/plain/ckpt-00000020.h5" --out "$dir/x"
contains "$dir/plot_not_watch.err" "is not an attention watch file"
# what is not a regular file is refused before it is opened: a FIFO would wait for ever
mkfifo "$dir/fifo.h5"
run 1 plot_fifo timeout -s KILL 20 "$plot" "$dir/fifo.h5" --out "$dir/x"
contains "$dir/plot_fifo.err" "watch::Log::read_h5: '$dir/fifo.h5' is a FIFO, not a regular file; expected an attention watch file"
run 1 plot_fifo_compare timeout -s KILL 20 "$plot" "$dir/watched/watch.h5" "$dir/fifo.h5" --compare "$dir/x"
contains "$dir/plot_fifo_compare.err" "'$dir/fifo.h5' is a FIFO, not a regular file"
run 1 plot_dir "$plot" "$dir/watched" --out "$dir/x"
contains "$dir/plot_dir.err" "'$dir/watched' is a directory, not a regular file"
for device in /dev/zero /dev/null; do
  run 1 "plot_${device#/dev/}" timeout -s KILL 20 "$plot" "$device" --out "$dir/x"
  contains "$dir/plot_${device#/dev/}.err" "'$device' is a character device, not a regular file"
done

# --- the documented layout, read with h5py; the same numbers as the CSV
python=${PYTHON:-/usr/bin/python3}
if "$python" -c "import h5py, numpy" 2>/dev/null; then
  "$python" - "$dir/watched/watch.h5" "$dir/watched/watch.csv" <<'EOF' >"$dir/h5py.out" 2>&1 || fail "h5py: $(tail -3 "$dir/h5py.out")"
import csv, sys, h5py, numpy as np
path, table = sys.argv[1], sys.argv[2]
with h5py.File(path, "r") as f:
    assert f.attrs["format"] == "ember attention watch", f.attrs["format"]
    assert int(f.attrs["version"]) == 1
    modules = f.attrs["modules"].split(",")
    assert modules == ["encoder_self", "decoder_self", "decoder_cross"], modules
    L, H = int(f.attrs["layers"]), int(f.attrs["heads"])
    steps = f["step"][:]
    assert list(steps) == [0, 10, 20, 30, 40], steps
    rows = list(csv.DictReader(open(table)))
    for m in modules:
        for q in ["score_std", "entropy_mean", "entropy_p10", "entropy_norm_mean", "entropy_norm_p10",
                  "max_weight_mean", "saturated_share", "grad_weights_norm", "grad_scores_norm", "grad_ratio",
                  "grad_q_proj_norm", "grad_k_proj_norm", "grad_scores_example_cv",
                  "grad_scores_example_max_ratio", "max_logit"]:
            d = f[m][q]
            assert d.shape == (5, L, H) and d.dtype == np.float64, (m, q, d.shape)
            assert len(d.attrs["meaning"]) > 10
            for r in rows:
                if r["module"] != m:
                    continue
                c = list(steps).index(int(r["step"]))
                a, b = float(r[q]), d[c, int(r["layer"]) - 1, int(r["head"]) - 1]
                assert (np.isnan(a) and np.isnan(b)) or a == b, (m, q, r, b)
    # the decoder has one layer of two: its second is NaN; the ratio is the ratio
    assert np.isnan(f["decoder_self/grad_ratio"][:, 1, :]).all()
    ratio = f["encoder_self/grad_scores_norm"][:] / f["encoder_self/grad_weights_norm"][:]
    assert np.allclose(ratio, f["encoder_self/grad_ratio"][:], rtol=1e-14)
    e = f["encoder_self/entropy_norm_mean"][:]
    assert ((e > 0) & (e <= 1)).all(), e
print("h5py reads the layout")
EOF
  # a well-formed file whose module names would put figures outside --out is refused,
  # naming the file and the name; nothing is written outside --out
  for name in "a/b" "../escaped"; do
    tag=$(printf '%s' "$name" | tr -c 'a-z' _)
    "$python" - "$dir/watched/watch.h5" "$dir/names_$tag.h5" "$name" <<'EOF' >"$dir/h5py_names.out" 2>&1 || fail "h5py: $(tail -3 "$dir/h5py_names.out")"
import shutil, sys, h5py
source, target, name = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.copy(source, target)
with h5py.File(target, "r+") as f:
    f.copy(f["encoder_self"], name)
    del f["encoder_self"]
    f.attrs["modules"] = ",".join([name, "decoder_self", "decoder_cross"])
EOF
    mkdir -p "$dir/names_out_$tag/sub"
    run 1 "plot_name_$tag" "$plot" "$dir/names_$tag.h5" --out "$dir/names_out_$tag/sub"
    contains "$dir/plot_name_$tag.err" "watch::Log::read_h5: '$dir/names_$tag.h5': attribute 'modules' names module \"$name\", which cannot name a figure file"
    [ "$(ls -A "$dir/names_out_$tag")" = sub ] || fail "files were written beside --out"
    [ -z "$(ls -A "$dir/names_out_$tag/sub")" ] || fail "figures were written for a file with a bad module name"
  done
  # an empty module name ("a,,b") is refused, not skipped
  "$python" - "$dir/watched/watch.h5" "$dir/empty_name.h5" <<'EOF' >"$dir/h5py_empty.out" 2>&1 || fail "h5py: $(tail -3 "$dir/h5py_empty.out")"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    f.attrs["modules"] = "encoder_self,,decoder_self,decoder_cross"
EOF
  run 1 plot_empty_name "$plot" "$dir/empty_name.h5" --out "$dir/empty_name_out"
  contains "$dir/plot_empty_name.err" "attribute 'modules' names module \"\", which cannot name a figure file"
  # a file whose values are all 1e308 (finite) draws its figures
  "$python" - "$dir/watched/watch.h5" "$dir/huge.h5" <<'EOF' >"$dir/h5py_huge.out" 2>&1 || fail "h5py: $(tail -3 "$dir/h5py_huge.out")"
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    for m in f.attrs["modules"].split(","):
        for q in f[m]:
            f[m][q][...] = 1e308
EOF
  run 0 plot_huge "$plot" "$dir/huge.h5" --out "$dir/huge"
  for f in encoder_self decoder_self decoder_cross grad_ratio score_spread example_spread max_logit; do png "$dir/huge/watch_$f.png"; done
  run 0 plot_huge_compare "$plot" "$dir/huge.h5" "$dir/watched/watch.h5" --compare "$dir/huge_both"
  png "$dir/huge_both_attention.png"
else
  echo "h5py not available: the layout check with h5py is skipped"
fi

# --- a resumed run keeps the watch up to its checkpoint and goes on
mkdir -p "$dir/resumed" && cp "$dir/watched/ckpt-00000020.h5" "$dir/resumed/" && cp "$dir/watched/watch.h5" "$dir/resumed/"
run 0 resume "$bin" train "${small[@]}" --out "$dir/resumed" --steps 40 --resume auto --watch --watch-every 10 --watch-rows 12
cmp -s "$dir/resumed/ckpt-00000040.h5" "$dir/plain/ckpt-00000040.h5" || fail "the resumed, watched run's checkpoint differs"
contains "$dir/resume.out" "watch: 2 measurements"
cmp -s "$dir/resumed/watch.csv" "$dir/watched/watch.csv" || fail "the resumed watch differs from the uninterrupted one"
# a damaged watch file does not stop training: a new watch begins
mkdir -p "$dir/damaged" && cp "$dir/watched/ckpt-00000020.h5" "$dir/damaged/"
head -c 300 "$dir/watched/watch.h5" >"$dir/damaged/watch.h5"
run 0 damaged "$bin" train "${small[@]}" --out "$dir/damaged" --steps 40 --resume auto --watch --watch-every 10
contains "$dir/damaged.out" "a new watch begins (the old one cannot be read: "
contains "$dir/damaged.out" "the old file is now $dir/damaged/watch.h5.old"
[ "$(steps "$dir/damaged/watch.csv")" = "20 30 40 " ] || fail "the new watch's steps: $(steps "$dir/damaged/watch.csv")"
[ "$(head -c 300 "$dir/watched/watch.h5" | cmp - "$dir/damaged/watch.h5.old" && echo same)" = same ] ||
  fail "the damaged watch file was not kept as watch.h5.old"

# a FIFO where the watch file should be is refused at once, never waited on (timeout: a
# regression fails rather than hangs); training goes on and the FIFO stays
mkdir -p "$dir/fifo" && cp "$dir/watched/ckpt-00000020.h5" "$dir/fifo/" && mkfifo "$dir/fifo/watch.h5"
run 0 fifo_resume timeout -s KILL 60 "$bin" train "${small[@]}" --out "$dir/fifo" --steps 30 --resume auto --watch \
  --watch-every 10
contains "$dir/fifo_resume.out" "a new watch begins (the old one cannot be read: watch::Log::read_h5: '$dir/fifo/watch.h5' is a FIFO, not a regular file; expected an attention watch file)"
contains "$dir/fifo_resume.err" "'$dir/fifo/watch.h5' exists and is a FIFO, not a regular file"
[ -p "$dir/fifo/watch.h5" ] || fail "the FIFO in the run's directory was replaced"
[ -s "$dir/fifo/ckpt-00000030.h5" ] || fail "the run with a FIFO for its watch file did not save step 30"

# a resumed run watched on another probe batch starts a new watch rather than splice two
mkdir -p "$dir/rows" && cp "$dir/watched/ckpt-00000020.h5" "$dir/watched/watch.h5" "$dir/rows/"
run 0 rows "$bin" train "${small[@]}" --out "$dir/rows" --steps 30 --resume auto --watch --watch-every 10 --watch-rows 5
contains "$dir/rows.out" "a new watch begins ($dir/rows/watch.h5 watched another model or probe batch); the old file is now $dir/rows/watch.h5.old"
[ "$(steps "$dir/rows/watch.csv")" = "20 30 " ] || fail "the new watch's steps: $(steps "$dir/rows/watch.csv")"
cmp -s "$dir/watched/watch.h5" "$dir/rows/watch.h5.old" || fail "the replaced watch file was not kept as watch.h5.old"
# a probe batch is at most 1024 rows: more is refused before anything runs
run 2 rows_max "$bin" train "${small[@]}" --out "$dir/rows_max" --steps 30 --watch --watch-rows 1025
contains "$dir/rows_max.err" "--watch-rows"
[ ! -e "$dir/rows_max/watch.h5" ] || fail "a refused --watch-rows wrote a watch"
# a loss that stops being finite saves no checkpoint, yet the watch up to it is written
run 3 diverged "$bin" train "${small[@]}" --out "$dir/diverged" --steps 200 --save-every 1000 --lr 1e8 --warmup 100 \
  --watch --watch-every 1
contains "$dir/diverged.err" "stopping without saving"
last=$(sed -n 's/.*the loss is [a-zA-Z]* at step \([0-9]*\).*/\1/p' "$dir/diverged.err")
[ -n "$last" ] && [ "$(steps "$dir/diverged/watch.csv" | awk '{ print $NF }')" -eq $((last - 1)) ] ||
  fail "the diverged run's watch does not reach step $((last - 1)): $(steps "$dir/diverged/watch.csv" | tail -c 30)"

# --- translate watch: the per-head table of one checkpoint
run 0 table "$bin" watch --checkpoint "$dir/watched/ckpt-00000040.h5" --data "$dir/valid.tsv" --rows 12
contains "$dir/table.out" "step 40, d_model 16, 2 heads (d_k 8), --score-scale 1; the first 12 pairs"
[ "$(grep -c '^decoder cross-attention  *1  *[12] ' "$dir/table.out")" -eq 2 ] || fail "the table lacks the cross-attention heads"
[ "$(grep -c 'self-attention\|cross-attention' "$dir/table.out")" -eq 8 ] || fail "expected 8 head lines"
printf 'sunday, november 22, 2026 and then a very long tail of words that no model of ours reads\t2026-11-22\n' >"$dir/long.tsv"
run 1 table_long "$bin" watch --checkpoint "$dir/watched/ckpt-00000040.h5" --data "$dir/long.tsv"
contains "$dir/table_long.err" "translate watch: $dir/long.tsv:1: the source has 88 characters, but the model's max_len 64"
run 1 table_missing "$bin" watch --checkpoint "$dir/nothing.h5"
contains "$dir/table_missing.err" "nothing.h5"

# --- --score-scale: in the checkpoint, refused if changed on resume, shown by watch
run 0 unscaled "$bin" train "${small[@]}" --out "$dir/unscaled" --steps 20 --score-scale 2.8284271247461903
cmp -s "$dir/unscaled/ckpt-00000020.h5" "$dir/plain/ckpt-00000020.h5" && fail "--score-scale changed nothing"
run 0 unscaled_table "$bin" watch --checkpoint "$dir/unscaled/ckpt-00000020.h5" --data "$dir/valid.tsv" --rows 4
contains "$dir/unscaled_table.out" "--score-scale 2.82843"
run 1 rescale "$bin" train "${small[@]}" --out "$dir/unscaled" --steps 40 --resume auto --score-scale 1
contains "$dir/rescale.err" "--score-scale 1 (the checkpoint's score scale is 2.8284271247461903)"
run 0 same_scale "$bin" train "${small[@]}" --out "$dir/unscaled" --steps 30 --resume auto --score-scale 2.8284271247461903
contains "$dir/same_scale.out" "--score-scale 2.8284271247461903 match the checkpoint"
for bad in 0 -1 nan 1e7; do
  run 2 "scale_$bad" "$bin" train "${small[@]}" --out "$dir/bad" --steps 1 --score-scale "$bad"
  contains "$dir/scale_$bad.err" "--score-scale"
done
# --- --qk-norm: in the checkpoint (older ones, without the field, load as off), refused if
# changed on resume; --z-loss 0 trains bitwise as without it, a positive one differently
run 0 qk "$bin" train "${small[@]}" --out "$dir/qk" --steps 20 --qk-norm --watch --watch-every 10 --watch-rows 12
cmp -s "$dir/qk/ckpt-00000020.h5" "$dir/plain/ckpt-00000020.h5" && fail "--qk-norm changed nothing"
run 0 qk_eval "$bin" eval --checkpoint "$dir/qk/ckpt-00000020.h5" --data "$dir/valid.tsv"
run 0 qk_resume "$bin" train "${small[@]}" --out "$dir/qk" --steps 30 --resume auto
if python3 -c 'import h5py' 2>/dev/null; then
  python3 - "$dir/qk/ckpt-00000020.h5" "$dir/plain/ckpt-00000020.h5" <<'PY' || fail "qk_norm in the checkpoints"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert int(f["config"].attrs["qk_norm"]) == 1
    names = []
    f.visit(names.append)
    assert any(n.endswith("self_attn.k_norm.bias") for n in names), names
with h5py.File(sys.argv[2], "r") as f:
    assert int(f["config"].attrs["qk_norm"]) == 0
PY
fi
run 0 z0 "$bin" train "${small[@]}" --out "$dir/z0" --steps 20 --z-loss 0
cmp -s "$dir/z0/ckpt-00000020.h5" "$dir/plain/ckpt-00000020.h5" || fail "--z-loss 0 trains differently"
run 1 unqk "$bin" train "${small[@]}" --out "$dir/z0" --steps 40 --resume auto --qk-norm
contains "$dir/unqk.err" "--qk-norm"
contains "$dir/unqk.err" "(the checkpoint's qk-norm setting is 0)"
run 0 z "$bin" train "${small[@]}" --out "$dir/z" --steps 20 --z-loss 1e-2
cmp -s "$dir/z/ckpt-00000020.h5" "$dir/plain/ckpt-00000020.h5" && fail "--z-loss 1e-2 changed nothing"
# --- --precision bf16: bfloat16 products, watched or not, on 1 or 2 threads: the same bits;
# kept in the checkpoint, so that a resumed run goes on in bf16; evaluated in float32.
# Where the processor has no AVX512_BF16 (or EMBER_NO_BF16 says so): float32, said once.
run 0 bf16 "$bin" train "${small[@]}" --out "$dir/bf16" --steps 40 --precision bf16 --watch --watch-every 10 --watch-rows 12
run 0 bf16_threads "$bin" train "${small[@]}" --out "$dir/bf16_threads" --steps 20 --precision bf16 --threads 2
cmp -s "$dir/bf16/ckpt-00000020.h5" "$dir/bf16_threads/ckpt-00000020.h5" || fail "--precision bf16 differs on 2 threads"
run 0 bf16_first "$bin" train "${small[@]}" --out "$dir/bf16_resumed" --steps 20 --precision bf16
run 0 bf16_resume "$bin" train "${small[@]}" --out "$dir/bf16_resumed" --steps 40 --resume auto
cmp -s "$dir/bf16_resumed/ckpt-00000040.h5" "$dir/bf16/ckpt-00000040.h5" || fail "a resumed bf16 run differs"
run 0 bf16_eval "$bin" eval --checkpoint "$dir/bf16/ckpt-00000020.h5" --data "$dir/valid.tsv"
EMBER_NO_BF16=1 run 0 bf16_off "$bin" train "${small[@]}" --out "$dir/bf16_off" --steps 20 --precision bf16
[ "$(grep -c 'matrix products under Autocast stay float32' "$dir/bf16_off.err")" = 1 ] || fail "no bfloat16: not said once"
contains "$dir/bf16_off.out" "float32 products (no AVX512_BF16, or EMBER_NO_BF16 set)"
losses() { grep '^step [0-9]*/' "$1" | sed 's/ *[0-9.]* tok\/s.*//'; }
cmp -s <(losses "$dir/bf16_off.out") <(losses "$dir/z0.out") || fail "without AVX512_BF16, --precision bf16 trains unlike float32"
if grep -q "bfloat16 products" "$dir/bf16.out"; then
  cmp -s "$dir/bf16/ckpt-00000020.h5" "$dir/plain/ckpt-00000020.h5" && fail "--precision bf16 changed nothing"
fi
run 2 precision_bad "$bin" train "${small[@]}" --out "$dir/bad" --steps 1 --precision fp16
contains "$dir/precision_bad.err" "--precision"
run 2 z_bad "$bin" train "${small[@]}" --out "$dir/bad" --steps 1 --z-loss -1
contains "$dir/z_bad.err" "--z-loss"
run 2 watch_every0 "$bin" train "${small[@]}" --out "$dir/bad" --steps 1 --watch --watch-every 0
contains "$dir/watch_every0.err" "--watch-every"

# --- tag_dates --watch: the same training with and without, and the files
tag=(--train "$dir/train.tsv" --test "$dir/valid.tsv" --steps 30 --warmup 5 --eval-every 15 --d-model 16 --heads 2 --ffn 32 --threads 1)
run 0 tag_plain "$tagger" "${tag[@]}" --out "$dir/tag_plain"
run 0 tag_watch "$tagger" "${tag[@]}" --out "$dir/tag_watch" --watch --watch-every 10 --watch-rows 8 --score-scale 1
grep '^step ' "$dir/tag_plain.out" | cut -d'(' -f1 >"$dir/a"
grep '^step ' "$dir/tag_watch.out" | cut -d'(' -f1 >"$dir/b"
cmp -s "$dir/a" "$dir/b" || fail "tag_dates trains differently with --watch"
contains "$dir/tag_watch.out" "watch: 4 measurements of the first 8 test dates"
for f in encoder_self grad_ratio score_spread example_spread max_logit; do png "$dir/tag_watch/watch_$f.png"; done
[ "$(wc -l <"$dir/tag_watch/watch.csv")" -eq $((1 + 4 * 2 * 2)) ] || fail "tag_dates' watch.csv has $(wc -l <"$dir/tag_watch/watch.csv") lines"
run 0 tag_unscaled "$tagger" "${tag[@]}" --out "$dir/tag_unscaled" --score-scale 2.8284271247461903
cmp -s "$dir/a" <(grep '^step ' "$dir/tag_unscaled.out" | cut -d'(' -f1) && fail "tag_dates --score-scale changed nothing"

# a stop signal ends a watched tagger in order, its watch written (SIGTERM: a background
# job of a script ignores SIGINT)
"$tagger" "${tag[@]}" --steps 100000 --eval-every 100000 --out "$dir/tag_int" --watch --watch-every 5 \
  >"$dir/tag_int.out" 2>&1 &
pid=$!
sleep 2
kill -TERM "$pid"
wait "$pid"
code=$?
[ "$code" -eq 143 ] || fail "tag_dates after SIGTERM: exit $code, expected 143"
contains "$dir/tag_int.out" "stopped by SIGTERM"
[ -s "$dir/tag_int/watch.h5" ] && [ -s "$dir/tag_int/watch.csv" ] || fail "tag_dates wrote no watch after SIGTERM"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
