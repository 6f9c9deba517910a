#!/usr/bin/env bash
# Data-parallel training on this machine, in one invocation: the translator at the same
# global batch (64) with 2 processes x 1 thread (mpirun) against 1 process x 2 threads
# and 1 process x 1 thread. For each: steps per second over a fixed run, then the time
# (and steps) to the first validation with at least 99% exact match; for the 2 processes,
# the time spent in MPI calls per step and its share, over OpenMPI's shared-memory
# transport and over TCP on the loopback (--mca btl self,tcp), which stands in for a
# network. Prints a table and writes it as JSON.
#
#   bench/dist.sh [--quick] [JSON_FILE]       (default bench/results/dist.json)
#
# --quick skips the runs to 99% (about 10 minutes of the whole). Needs the Release build
# of translate (cmake --build build --target translate) and OpenMPI's mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
json=bench/results/dist.json
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -*) echo "usage: bench/dist.sh [--quick] [JSON_FILE]" >&2; exit 2 ;;
    *) json=$a ;;
  esac
done
translate=./build/examples/translate/translate
[ -x "$translate" ] || { echo "build the translator first: cmake --build build --target translate" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "no mpirun: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 2; }
mkdir -p "$(dirname "$json")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset OMP_NUM_THREADS OMP_WAIT_POLICY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

steps=${EMBER_DIST_BENCH_STEPS:-400}
fixed=(--steps "$steps" --eval-every 1000000 --save-every 1000000 --log-every 100 --target-acc 2 --batch 64)
to99=(--steps 20000 --eval-every 200 --save-every 1000000 --log-every 1000 --target-acc 0.99 --batch 64)

# run NAME PROCESSES THREADS [MPIRUN OPTIONS...] -- TRANSLATE OPTIONS...
run() {
  local name=$1 np=$2 threads=$3
  shift 3
  local mpi=()
  while [ "$1" != "--" ]; do mpi+=("$1"); shift; done
  shift
  rm -rf "$work/out"
  if [ "$np" -eq 1 ]; then
    "$translate" train --out "$work/out" --threads "$threads" "$@" >"$work/$name.log"
  else
    mpirun -np "$np" "${mpi[@]}" "$translate" train --out "$work/out" --threads "$threads" "$@" >"$work/$name.log"
  fi
  grep -E "^done|^communication" "$work/$name.log" | sed "s/^/  $name: /"
}

echo "== $steps steps at batch 64"
run one_1t 1 1 -- "${fixed[@]}"
run one_2t 1 2 -- "${fixed[@]}"
run two_1t 2 1 -- "${fixed[@]}"
run two_1t_tcp 2 1 --mca btl self,tcp -- "${fixed[@]}"
if [ "$quick" -eq 0 ]; then
  echo "== to 99% validation exact match"
  run one_1t_99 1 1 -- "${to99[@]}"
  run one_2t_99 1 2 -- "${to99[@]}"
  run two_1t_99 2 1 -- "${to99[@]}"
fi

/usr/bin/python3 - "$work" "$json" "$quick" <<'PY'
import json, re, sys
work, out, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def parse(name):
    log = open(f"{work}/{name}.log").read()
    steps, train_s = re.search(r"done: (\d+) steps, ([\d.]+) s of training", log).groups()
    r = {"steps": int(steps), "train_s": float(train_s), "steps_per_s": int(steps) / float(train_s)}
    acc = re.findall(r"validation exact match ([\d.]+)%", log)
    if acc: r["acc"] = float(acc[-1]) / 100
    m = re.search(r"communication: ([\d.]+) s in MPI calls \(([\d.]+)% of training\), ([\d.]+) s of it waiting", log)
    if m:
        r["mpi_s"], r["mpi_share"], r["wait_s"] = float(m.group(1)), float(m.group(2)) / 100, float(m.group(3))
        r["mpi_ms_per_step"] = 1000 * r["mpi_s"] / r["steps"]
    m = re.search(r"([\d.]+) MB of gradients reduced per step", log)
    if m: r["gradient_mb_per_step"] = float(m.group(1))
    return r
res = {n: parse(n) for n in ["one_1t", "one_2t", "two_1t", "two_1t_tcp"]}
if not quick:
    for n in ["one_1t_99", "one_2t_99", "two_1t_99"]: res[n] = parse(n)
base, two_t, ranks = res["one_1t"], res["one_2t"], res["two_1t"]
res["scaling"] = {"two_ranks_vs_one_thread": ranks["steps_per_s"] / base["steps_per_s"],
                  "two_ranks_vs_two_threads": ranks["steps_per_s"] / two_t["steps_per_s"],
                  "two_threads_vs_one_thread": two_t["steps_per_s"] / base["steps_per_s"],
                  "tcp_vs_shm": res["two_1t_tcp"]["steps_per_s"] / ranks["steps_per_s"]}
print(f"\n{'':32}{'steps/s':>9}{'x 1x1':>8}{'MPI ms/step':>13}{'MPI share':>11}")
for n, label in [("one_1t", "1 process x 1 thread"), ("one_2t", "1 process x 2 threads"),
                 ("two_1t", "2 processes x 1 thread (shm)"), ("two_1t_tcp", "2 processes x 1 thread (tcp)")]:
    r = res[n]
    mpi = f"{r['mpi_ms_per_step']:13.2f}{100 * r['mpi_share']:10.1f}%" if "mpi_s" in r else ""
    print(f"{label:32}{r['steps_per_s']:9.2f}{r['steps_per_s'] / base['steps_per_s']:8.2f}{mpi}")
if not quick:
    print(f"\n{'to 99% validation exact match':32}{'steps':>9}{'train s':>9}{'x 1x1':>8}")
    for n, label in [("one_1t_99", "1 process x 1 thread"), ("one_2t_99", "1 process x 2 threads"),
                     ("two_1t_99", "2 processes x 1 thread")]:
        r = res[n]
        print(f"{label:32}{r['steps']:9d}{r['train_s']:9.1f}{res['one_1t_99']['train_s'] / r['train_s']:8.2f}")
json.dump(res, open(out, "w"), indent=1)
print(f"\nwrote {out}")
PY
