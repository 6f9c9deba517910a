#!/usr/bin/env bash
# The benchmark suite in one command: installs what is missing (PyTorch included), builds
# the Release benchmarks, runs every workload with ember and with its reference in this
# same invocation, prints one table of times, ratios and GFLOP/s, and writes it as JSON.
#
#   bench/run.sh [--quick] [JSON_FILE]      (default bench/results/suite.json)
#
# Workloads: matmul and a Linear layer against raw cblas_sgemm (bench_matmul);
# MultiHeadAttention at the seeds' and larger shapes (bench_mha against
# ../shared/bench/torch_mha_bench.py, alternating, 5 times each); LayerNorm, softmax and
# cross-entropy forward+backward, attention time and memory for L = 64 .. 1024, one translator training
# step (with 2 threads and 1, under Autocast's bfloat16 products against PyTorch's bf16 autocast, and
# the GFLOP/s of its matrix products against raw cblas_sgemm at the model's products, timed in the
# same round) and greedy decoding (bench_suite against bench/torch_suite.py, alternating, 3 and 7
# times); a larger model's training step (d_model 512, 6+6 layers, FFN 2048, batch 32 of 48 tokens:
# float32 and bf16 against PyTorch's float32 and bf16 autocast, raw sgemm at its products, the peak
# memory of each in a fresh process; alternating, 3 times); what driving ember from Python costs
# (bench/python_overhead.py: a small op against PyTorch's, the training step from Python against
# C++'s); Hessian-vector products by forward-over-reverse against reverse-over-reverse
# (bench_suite hvp: time and peak tensor memory); per-example gradients against the loop of
# backward passes they replace (bench_suite per-sample); the watch's curvature measurement against
# the training step (bench_suite curvature); peak resident memory of a 300-step training
# run and the large-buffer allocation counter (translate against
# ../shared/bench/torch_translate_ref.py); and, unless --quick, the main job's time to
# 99.5% validation exact match with the same recipe in PyTorch (bench/translate_vs_torch.sh,
# about 8 minutes more), and the main job as scripts/main.sh runs it (bf16, watched) on seeds
# 1, 2 and 3 (about 2 minutes).
# Everything runs on 2 threads, each side at its fastest setting here: PyTorch with
# OMP_WAIT_POLICY=PASSIVE (spinning threads cost it up to 2.7x), ember with libgomp's
# default policy (its OpenBLAS shares ember's OpenMP threads, so spinning never fights).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
json=bench/results/suite.json
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -*) echo "usage: bench/run.sh [--quick] [JSON_FILE]" >&2; exit 2 ;;
    *) json=$a ;;
  esac
done
shared=${EMBER_SHARED_BENCH:-../shared/bench}
[ -f "$shared/torch_mha_bench.py" ] || { echo "no PyTorch references in $shared (set EMBER_SHARED_BENCH)" >&2; exit 2; }

# pybind11-dev ... python3-numpy: the Python module python_overhead.py drives;
# libopenblas0-pthread: PyTorch finds its BLAS through Debian's alternatives, and runs fastest
# here on the pthread build (ember links the OpenMP build by path, whatever they say)
bash scripts/install_deps.sh python3-torch python3-h5py time libopenblas0-pthread pybind11-dev libdlpack-dev python3-dev python3-numpy
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target bench_matmul bench_mha bench_suite translate ember_python >/dev/null

unset OMP_WAIT_POLICY
export OMP_NUM_THREADS=2
py="env OMP_WAIT_POLICY=PASSIVE /usr/bin/python3"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mha_rounds=5  # MultiHeadAttention's times are medians over these alternating runs
rounds=3      # the layer ops' over these
train_rounds=7  # the training step's (on 2 threads, on 1, bf16, PyTorch's float32 and bf16, sgemm) over these
big_rounds=3    # and the larger model's (a step takes seconds; --quick: 1)
if [ "$quick" = 1 ]; then big_rounds=1; fi
mkdir -p "$(dirname "$json")"

echo "== matmul against raw sgemm"
build/bench/bench_matmul --json "$work/matmul.json"
echo "== MultiHeadAttention: ember, then PyTorch, alternating, $mha_rounds times"
for r in $(seq "$mha_rounds"); do
  build/bench/bench_mha --json "$work/mha.$r.json" >"$work/mha.$r.txt"
  $py "$shared/torch_mha_bench.py" --threads 2 --json "$work/torch_mha.$r.json" >"$work/torch_mha.$r.txt"
done
cat "$work/mha.1.txt" "$work/torch_mha.1.txt"
echo "== layer ops and attention scaling: ember, then PyTorch, alternating, $rounds times"
for r in $(seq "$rounds"); do
  build/bench/bench_suite ops --json "$work/ops.$r.json" >"$work/ops.$r.txt"
  $py bench/torch_suite.py ops --json "$work/torch_ops.$r.json" 2>/dev/null >"$work/torch_ops.$r.txt"
done
cat "$work/ops.1.txt" "$work/torch_ops.1.txt"
echo "== attention memory (a fresh process per L)"
for L in 64 128 256 512 1024; do
  echo "$L $(build/bench/bench_suite attn-mem "$L") $($py bench/torch_suite.py attn-mem "$L")"
done | tee "$work/attn_mem.txt"
echo "== training step and decoding: ember on 2 threads, on 1 and in bf16, PyTorch in float32 and bf16 autocast,"
echo "   raw sgemm at the model's products, alternating, $train_rounds times"
for r in $(seq "$train_rounds"); do
  echo "round $r: $(build/bench/bench_suite cores)"  # how far apart the cores are now
  build/bench/bench_suite train --data data/dates --json "$work/train.$r.json"
  build/bench/bench_suite train --data data/dates --threads 1 --steps-only 50 --json "$work/train_1thread.$r.json"
  build/bench/bench_suite train --data data/dates --precision bf16 --json "$work/train_bf16.$r.json"
  $py bench/torch_suite.py train --data data/dates --ref "$shared/torch_translate_ref.py" \
    --json "$work/torch_train.$r.json" 2>/dev/null
  $py bench/torch_suite.py train --data data/dates --ref "$shared/torch_translate_ref.py" --precision bf16 \
    --json "$work/torch_train_bf16.$r.json" 2>/dev/null
  build/bench/bench_suite sgemm --shape date --json "$work/sgemm_date.$r.json"
done
echo "== a larger model's training step: ember in float32 and bf16, PyTorch in float32 and bf16 autocast,"
echo "   raw sgemm at its products, each in a fresh process, alternating, $big_rounds times"
for r in $(seq "$big_rounds"); do
  build/bench/bench_suite big --json "$work/big.$r.json"
  build/bench/bench_suite big --precision bf16 --json "$work/big_bf16.$r.json"
  $py bench/torch_suite.py big --json "$work/torch_big.$r.json" 2>/dev/null
  $py bench/torch_suite.py big --precision bf16 --json "$work/torch_big_bf16.$r.json" 2>/dev/null
  build/bench/bench_suite sgemm --shape big --json "$work/sgemm_big.$r.json"
done
echo "== Python's overhead: a small op and its backward against PyTorch's, the training step from Python against C++'s"
PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py --bench-suite build/bench/bench_suite --data data/dates \
  --json "$work/python_overhead.json"
echo "== Hessian-vector products: forward-over-reverse against reverse-over-reverse, alternating"
build/bench/bench_suite hvp --data data/dates --json "$work/hvp.json"
echo "== per-example gradients of the date model: per_sample_grads against a loop of 64 backward passes, alternating"
build/bench/bench_suite per-sample --data data/dates --json "$work/per_sample.json"
echo "== the watch's curvature measurement of the date model against its training step, alternating"
build/bench/bench_suite curvature --data data/dates --json "$work/curvature.json"
echo "== the same training step with the allocator's System policy (plain malloc, no caching)"
EMBER_ALLOCATOR=system build/bench/bench_suite train --data data/dates --json "$work/train_system.json"
echo "== peak memory of a 300-step training run: ember, then PyTorch"
/usr/bin/time -v -o "$work/ember_run.time" build/examples/translate/translate train --out "$work/run" --steps 300 \
  --eval-every 300 --save-every 1000 --threads 2 >"$work/ember_run.log"
grep -E "^memory" "$work/ember_run.log"
/usr/bin/time -v -o "$work/torch_run.time" $py "$shared/torch_translate_ref.py" --threads 2 --train data/dates/train.tsv \
  --valid data/dates/valid.tsv --max-steps 300 --eval-every 300 --stop-acc 2 >/dev/null 2>&1
if [ "$quick" = 0 ]; then
  echo "== the main job's recipe to 99.5% validation exact match: ember, then PyTorch"
  bash bench/translate_vs_torch.sh "$work/converge.json"
  echo "== the main job itself (--precision bf16, as scripts/main.sh trains) to 99.5%, seeds 1, 2, 3"
  for seed in 1 2 3; do
    build/examples/translate/translate train --out "$work/main_$seed" --precision bf16 --watch --seed "$seed" \
      --threads 2 >"$work/main_job.$seed.log"
    grep -E "^done:" "$work/main_job.$seed.log"
  done
fi
$py bench/report.py "$work" "$json"
