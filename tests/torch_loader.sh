#!/usr/bin/env bash
# examples/translate/load_in_torch.py, which builds the translator in PyTorch from the
# checkpoint format's document alone, translates exactly as `translate decode` does: a
# tiny model is trained, then 50 validation dates are decoded by both, in float64 and
# float32 - as trained (post-norm, ReLU), and edited into a pre-norm GELU model (final
# LayerNorms added, the header resealed) - and a model trained with --score-scale 3.
# Skipped when python3 lacks torch or h5py.
#   torch_loader.sh TRANSLATE_BINARY DATA_DIR SCRATCH_DIR LOAD_IN_TORCH_PY
set -uo pipefail
bin=$1 data=$2 dir=$3 script=$4
python=${PYTHON:-/usr/bin/python3}
if ! why=$("$python" -c "import numpy, h5py, torch" 2>&1); then
  echo "skipped: $python cannot import numpy, h5py and torch${why:+ ($(echo "$why" | tail -n 1 | sed "s/^ *//"))}"
  exit 0
fi
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

head -n 400 "$data/train.tsv" >"$dir/train.tsv"
head -n 40 "$data/valid.tsv" >"$dir/valid.tsv"
head -n 50 "$data/valid.tsv" | cut -f1 >"$dir/sources.txt"
"$bin" train --train "$dir/train.tsv" --valid "$dir/valid.tsv" --d-model 16 --heads 2 --enc-layers 1 \
  --dec-layers 1 --ffn 32 --steps 400 --eval-every 400 --threads 1 --out "$dir/run" >"$dir/train.out" 2>&1 ||
  { cat "$dir/train.out"; echo "FAILED: translate train"; exit 1; }
post="$dir/run/ckpt-00000400.h5"
# A model whose scores are scaled by 3 on top of 1/sqrt(d_k): the loader folds that into the
# query projection.
"$bin" train --train "$dir/train.tsv" --valid "$dir/valid.tsv" --d-model 16 --heads 2 --enc-layers 1 \
  --dec-layers 1 --ffn 32 --steps 400 --eval-every 400 --threads 1 --score-scale 3 --out "$dir/scaled" \
  >"$dir/scaled.out" 2>&1 || { cat "$dir/scaled.out"; echo "FAILED: translate train --score-scale 3"; exit 1; }
scaled="$dir/scaled/ckpt-00000400.h5"

# The same model made pre-norm with GELU: a LayerNorm (not the identity) ends each stack.
pre="$dir/prenorm.h5"
cp "$post" "$pre"
"$python" - "$pre" <<'EOF' || fail "could not write the pre-norm checkpoint"
import sys, zlib, h5py, numpy as np
path, rng = sys.argv[1], np.random.default_rng(1)
with h5py.File(path, "r+") as f:
    f["config"].attrs["norm_first"] = np.int64(1)
    f["config"].attrs["activation"] = "gelu"
    d = int(f["config"].attrs["d_model"])
    for stack in ("encoder", "decoder"):
        f["model"][f"{stack}.norm.weight"] = (1 + 0.2 * rng.standard_normal(d)).astype(np.float32)
        f["model"][f"{stack}.norm.bias"] = (0.2 * rng.standard_normal(d)).astype(np.float32)
data = bytearray(open(path, "rb").read())  # reseal: size and CRC-32 of everything after the header
header = f"ember checkpoint\nschema 1\nsize {len(data)}\ncrc32 {zlib.crc32(data[512:]):08x}\n"
data[:512] = header.encode().ljust(512, b"\0")
open(path, "wb").write(data)
EOF

for name in postnorm prenorm scaled; do
  ckpt=$post
  [ "$name" = prenorm ] && ckpt=$pre
  [ "$name" = scaled ] && ckpt=$scaled
  "$bin" decode --checkpoint "$ckpt" <"$dir/sources.txt" >"$dir/$name.ember" 2>"$dir/$name.ember.err" ||
    { fail "$name: translate decode failed"; cat "$dir/$name.ember.err"; }
  # not trivial: some translations stop at </s> (before 63 = max_len - 1 tokens), and differ
  [ "$(awk 'length > 0 && length < 63' "$dir/$name.ember" | sort -u | wc -l)" -ge 5 ] ||
    fail "$name: fewer than 5 distinct translations that end before the length limit"
  for precision in float64 float32; do
    flag=()
    [ "$precision" = float32 ] && flag=(--float32)
    out="$dir/$name.torch.$precision"
    "$python" "$script" --checkpoint "$ckpt" "${flag[@]}" <"$dir/sources.txt" >"$out" 2>"$out.err" ||
      { fail "$name $precision: load_in_torch.py failed"; cat "$out.err"; }
    if cmp -s "$dir/$name.ember" "$out"; then
      echo "$name, $precision: PyTorch's $(wc -l <"$out") translations equal ember's"
    else
      fail "$name $precision: PyTorch's translations differ from ember's"
      diff "$dir/$name.ember" "$out" | head -n 10
    fi
  done
done
paste "$dir/sources.txt" "$dir/postnorm.ember" | head -n 3 | sed 's/\t/ -> /; s/^/  /'

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
