#!/usr/bin/env bash
# The date translator trained by ember and by the PyTorch reference
# (../shared/bench/torch_translate_ref.py, run by bench/torch_translate_cosine.py with the
# same schedule), one after the other on this machine, on the same data (data/dates),
# with the same model and the main job's recipe (`translate train`'s defaults: Adam at
# 3e-3 after 150 warmup steps, a cosine to 1.5e-4 at step 700, batch 64, dropout 0.1),
# each until the first validation (every 100 steps) with at least 99.5% exact match.
# Prints each one's training time, steps, steps/s and peak memory, and the ratios;
# writes them as JSON.
#
#   bench/translate_vs_torch.sh [JSON_FILE] [SEED]   (default bench/results/translate.json, 1)
#
# Needs the Release build (`cmake --build build --target translate`), /usr/bin/python3
# with torch (apt-get install python3-torch) and /usr/bin/time. Both runs use 2 threads,
# each at its fastest setting: PyTorch with OMP_WAIT_POLICY=PASSIVE, ember with libgomp's
# default. Install libopenblas0-pthread first: PyTorch, which finds its BLAS through Debian's
# alternatives, runs fastest here on the pthread build (bench/run.sh does this).
set -euo pipefail
cd "$(dirname "$0")/.."
json=${1:-bench/results/translate.json}
seed=${2:-1}
ref=${TORCH_REF:-../shared/bench/torch_translate_ref.py}
translate=./build/examples/translate/translate
[ -x "$translate" ] || { echo "build the translator first: cmake --build build --target translate" >&2; exit 2; }
[ -f "$ref" ] || { echo "no PyTorch reference at $ref (set TORCH_REF)" >&2; exit 2; }
mkdir -p "$(dirname "$json")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset OMP_WAIT_POLICY
export OMP_NUM_THREADS=2

echo "== ember"
/usr/bin/time -v -o "$work/ember.time" "$translate" train --out "$work/ember" --seed "$seed" --threads 2 | tee "$work/ember.log" | grep -E "validation|done"
echo "== PyTorch"
/usr/bin/time -v -o "$work/torch.time" env OMP_WAIT_POLICY=PASSIVE TORCH_REF_BASE="$ref" \
  /usr/bin/python3 bench/torch_translate_cosine.py --lr 3e-3 --warmup 150 --decay-steps 700 --seed "$seed" --threads 2 \
  --train data/dates/train.tsv --valid data/dates/valid.tsv --stop-acc 0.995 --target-acc 0.995 --eval-every 100 \
  --json "$work/torch.json" | tee "$work/torch.log" |
  grep -E "^step"

/usr/bin/python3 - "$work" "$json" <<'PY'
import json, re, sys
work, out = sys.argv[1], sys.argv[2]
def rss_mb(path):
    for line in open(path):
        if "Maximum resident" in line:
            return int(line.split(":")[1]) / 1024
log = open(f"{work}/ember.log").read()
steps, train_s, wall_s = re.search(r"done: (\d+) steps, ([\d.]+) s of training \(([\d.]+) s wall\)", log).groups()
acc = re.findall(r"validation exact match ([\d.]+)%", log)[-1]
ember = {"steps": int(steps), "train_s": float(train_s), "wall_s": float(wall_s), "acc": float(acc) / 100,
         "steps_per_s": int(steps) / float(train_s), "peak_rss_mb": rss_mb(f"{work}/ember.time")}
t = json.load(open(f"{work}/torch.json"))
torch = {"steps": t["first_hit"]["step"] if t.get("first_hit") else t["steps"], "train_s": t["train_s"],
         "wall_s": t["wall_s"], "acc": t["final_acc"], "steps_per_s": t["steps_per_s"],
         "peak_rss_mb": rss_mb(f"{work}/torch.time")}
ratio = {k: ember[k] / torch[k] for k in ("train_s", "wall_s", "steps_per_s", "peak_rss_mb")}
print(f"\n{'':24}{'ember':>10}{'PyTorch':>10}{'ratio':>8}")
for k, label in [("steps", "steps to 99.5%"), ("train_s", "training s"), ("wall_s", "wall s"),
                 ("steps_per_s", "steps/s"), ("peak_rss_mb", "peak RSS MB"), ("acc", "validation exact")]:
    r = f"{ratio[k]:8.2f}" if k in ratio else ""
    print(f"{label:24}{ember[k]:10.4g}{torch[k]:10.4g}{r}")
json.dump({"ember": ember, "torch": torch, "ratio": ratio}, open(out, "w"), indent=1)
print(f"\nwrote {out}")
PY
