#!/usr/bin/env bash
# nn::MultiHeadAttention against PyTorch's nn.MultiheadAttention, measured one after the
# other on this machine: ember's bench_mha and ../shared/bench/torch_mha_bench.py, at the
# same shapes and modes, 2 threads, OMP_WAIT_POLICY=PASSIVE. Prints both medians and
# their ratio per shape and mode, and writes them as JSON.
#
#   bench/mha_vs_torch.sh [JSON_FILE]     (default bench/results/mha.json)
set -euo pipefail
cd "$(dirname "$0")/.."
json=${1:-bench/results/mha.json}
ref=${TORCH_MHA_REF:-../shared/bench/torch_mha_bench.py}
[ -x build/bench/bench_mha ] || { echo "build it first: cmake --build build --target bench_mha" >&2; exit 2; }
[ -f "$ref" ] || { echo "no PyTorch reference at $ref (set TORCH_MHA_REF)" >&2; exit 2; }
mkdir -p "$(dirname "$json")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2
echo "== ember"
build/bench/bench_mha --json "$work/ember.json"
echo "== PyTorch"
/usr/bin/python3 "$ref" --threads 2 --json "$work/torch.json"
/usr/bin/python3 - "$work" "$json" <<'PY'
import json, sys
work, out = sys.argv[1], sys.argv[2]
key = lambda r: (r["batch"], r["seq"], r["embed"], r["heads"], r["mode"])
ours = {key(r): r for r in json.load(open(f"{work}/ember.json"))["results"]}
ref = {key(r): r for r in json.load(open(f"{work}/torch.json"))["results"]}
rows = []
print(f"\n{'[B, L, E, H]':<18} {'mode':<11} {'ember ms':>9} {'torch ms':>9} {'ratio':>6} {'ember GF/s':>10}")
for k, r in ours.items():
    t = ref.get(k)
    if not t:
        continue
    ratio = r["median_ms"] / t["median_ms"]
    rows.append(dict(shape=k[:4], mode=k[4], ember_ms=r["median_ms"], torch_ms=t["median_ms"], ratio=ratio,
                     ember_gflops=r["gflops"]))
    print(f"{str(list(k[:4])):<18} {k[4]:<11} {r['median_ms']:9.3f} {t['median_ms']:9.3f} {ratio:6.2f} {r['gflops']:10.1f}")
json.dump(rows, open(out, "w"), indent=1)
print(f"\nwrote {out}")
PY
