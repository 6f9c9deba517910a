#!/usr/bin/python3
"""Merges the measurements bench/run.sh collected in WORK_DIR into one table, checks the
performance floors, and writes both as JSON.

    report.py WORK_DIR JSON_FILE

Ratio = ember's time / the reference's time (below 1: ember is faster); for throughputs
(steps/s, sentences/s) the ratio is ember's / the reference's (above 1: ember is faster).
Workloads measured in alternating rounds (MultiHeadAttention, the layer ops, the training
step) show each side's median over the rounds and the median of the rounds' ratios.
"""
import datetime
import json
import os
import platform
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def rss_mb(path):
    with open(path) as f:
        for line in f:
            if "Maximum resident" in line:
                return int(line.split(":")[1]) / 1024
    raise SystemExit(f"report.py: no peak RSS in {path}")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    work, out = sys.argv[1], sys.argv[2]
    rows, floors = [], []

    def add(group, workload, shape, ours, ref, ref_name, unit="ms", gflops=None, ref_gflops=None, ratio=None):
        if ratio is None:
            ratio = ours / ref if ref else float("nan")
        rows.append(dict(group=group, workload=workload, shape=shape, ember=ours, reference=ref, reference_name=ref_name,
                         unit=unit, ratio=ratio, ember_gflops=gflops, reference_gflops=ref_gflops))
        return ratio

    def floor(what, ok, detail):
        floors.append(dict(floor=what, holds=bool(ok), detail=detail))

    # matmul against raw sgemm
    worst, sgemm_rate = 0.0, 0.0
    for c in load(f"{work}/matmul.json")["cases"]:
        if "batched" not in c["shape"]:
            sgemm_rate = max(sgemm_rate, c["sgemm_gflops"])
        add("matmul", c["shape"], "", c["ember_ms"], c["sgemm_ms"], "cblas_sgemm", gflops=c["ember_gflops"],
            ref_gflops=c["sgemm_gflops"])
        worst = max(worst, c["ratio"])
    floor("matmul-bound layers reach >= 80% of raw sgemm GFLOP/s", worst <= 1.25,
          f"lowest share of sgemm's rate: {100 / worst:.0f}%")

    # MultiHeadAttention: each side's median over the alternating rounds, and the median of
    # the rounds' ratios
    key = lambda r: (r["batch"], r["seq"], r["embed"], r["heads"], r["mode"])
    rounds = sorted(int(f.split(".")[1]) for f in os.listdir(work) if re.fullmatch(r"mha\.\d+\.json", f))
    ours_runs = [{key(r): r for r in load(f"{work}/mha.{i}.json")["results"]} for i in rounds]
    ref_runs = [{key(r): r for r in load(f"{work}/torch_mha.{i}.json")["results"]} for i in rounds]
    seeds_ratio = None
    for k in ours_runs[0] if ours_runs else []:
        if k[4] == "fwd_grad" or k not in ref_runs[0]:
            continue
        ours = [run[k] for run in ours_runs]
        theirs = [run[k] for run in ref_runs]
        ms, ref_ms = median([r["median_ms"] for r in ours]), median([t["median_ms"] for t in theirs])
        shape = str(list(k[:4])).replace(" ", "")
        add("MultiHeadAttention", k[4].replace("fwd_nograd", "forward").replace("fwd_bwd", "fwd+bwd"), shape, ms,
            ref_ms, "PyTorch", gflops=median([r["gflops"] for r in ours]),
            ref_gflops=median([t["gflops"] for t in theirs]))
        if k[4] == "fwd_bwd" and shape == "[2,5,512,8]":
            seeds_ratio = median([o["median_ms"] / t["median_ms"] for o, t in zip(ours, theirs)])
    floor("MultiHeadAttention fwd+bwd at [2,5,512,8] at most 0.5x PyTorch's time (median of the alternating rounds' "
          "ratios)", seeds_ratio is not None and seeds_ratio <= 0.5,
          f"ratio {seeds_ratio:.2f} over {len(rounds)} rounds" if seeds_ratio else "not measured")

    # layer ops, attention scaling, training step, decoding
    mem = {}
    with open(f"{work}/attn_mem.txt") as f:
        for line in f:
            L, ours, theirs = line.split()
            mem[int(L)] = (float(ours), float(theirs))
    # The layer ops and the training step ran in alternating rounds (ember's, then
    # PyTorch's): each side's value is its median over the rounds, a ratio the median of
    # the rounds' ratios (the two sides of a round run minutes apart at most, so a slower
    # stretch of the machine weighs on both).
    def rounds_of(stem):
        """{round: {(workload, shape): row}}; a file without rounds is round 0"""
        found = sorted(int(f.split(".")[1]) for f in os.listdir(work) if re.fullmatch(re.escape(stem) + r"\.\d+\.json", f))
        if not found:
            return {0: {(r["workload"], r["shape"]): r for r in load(f"{work}/{stem}.json")["results"]}}
        return {i: {(r["workload"], r["shape"]): r for r in load(f"{work}/{stem}.{i}.json")["results"]} for i in found}

    def merged(runs):
        """every row any round has, each number its median over the rounds that have the row"""
        out = {}
        for run in runs.values():
            for k, r in run.items():
                out.setdefault(k, dict(r))
        for k, m in out.items():
            for field, v in m.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    m[field] = median([run[k][field] for run in runs.values() if k in run])
        return out

    def round_ratio(ours_runs, ref_runs, k, field="ms"):
        """the median over rounds of ours / reference, each round against the same round
        (or, where a side ran once, every round against that run)"""
        if len(ours_runs) > 1 and len(ref_runs) > 1:
            pairs = [(ours_runs[i], ref_runs[i]) for i in ours_runs if i in ref_runs]
        else:
            pairs = [(o, t) for o in ours_runs.values() for t in ref_runs.values()]
        rs = [o[k][field] / t[k][field] for o, t in pairs if k in o and k in t and o[k][field] and t[k][field]]
        return median(rs) if rs else float("nan")

    scaling_ok = True
    for name in ("ops", "train"):
        ours_runs, ref_runs = rounds_of(name), rounds_of(f"torch_{name}")
        theirs, ours = merged(ref_runs), merged(ours_runs)
        single_runs = rounds_of("train_1thread") if name == "train" and (
            os.path.exists(f"{work}/train_1thread.json") or os.path.exists(f"{work}/train_1thread.1.json")) else None
        for k, r in ours.items():
            t = theirs.get(k)
            if t is None:
                floor(f"{r['workload']} {r['shape']} measured by PyTorch too", False, "no PyTorch row")
                continue
            g = r["gflops"] or None
            ratio = add(name, r["workload"], r["shape"], r["ms"], t["ms"], "PyTorch", gflops=g,
                        ref_gflops=t["gflops"] or None, ratio=round_ratio(ours_runs, ref_runs, k))
            if r["workload"] == "attention L-scaling":
                L = int(r["shape"].strip("[]").split(",")[1])
                m = mem[L]
                mratio = add("ops", "attention L-scaling memory", r["shape"], m[0], m[1], "PyTorch", unit="MB")
                scaling_ok = scaling_ok and ratio <= 1 and mratio <= 1
            if r["workload"].startswith("training step"):
                speedup = 1 / ratio  # (a rate's ratio: the time's, inverted)
                add("train", "training steps/s", r["shape"], 1e3 / r["ms"], 1e3 / t["ms"], "PyTorch", unit="steps/s",
                    ratio=speedup)
                add("train", "target tokens/s", r["shape"], r["tokens_per_s"], t["tokens_per_s"], "PyTorch",
                    unit="tokens/s", ratio=round_ratio(ours_runs, ref_runs, k, "tokens_per_s"))
                floor("training step at least 4x PyTorch's steps/s", speedup >= 4, f"{speedup:.2f}x")
                share = r["gflops"] / sgemm_rate if sgemm_rate else 0
                floor("training step at no less than 70% of raw sgemm's GFLOP/s", share >= 0.7,
                      f"{r['gflops']:.0f} GFLOP/s, every matrix product counted, against sgemm's {sgemm_rate:.0f}: "
                      f"{100 * share:.1f}%")
                if single_runs:
                    single = merged(single_runs)[k]
                    time_ratio = round_ratio(ours_runs, single_runs, k)
                    scaling = 1 / time_ratio
                    add("train", "training step, 2 threads (1 thread as reference)", r["shape"], r["ms"], single["ms"],
                        "1 thread", ratio=time_ratio)
                    floor("training step with 2 threads at least 1.85x the single-threaded step", scaling >= 1.85,
                          f"{scaling:.2f}x")
            if r["workload"] == "greedy decoding":
                add("train", "decoding sentences/s", r["shape"], r["sentences_per_s"], t["sentences_per_s"],
                    "PyTorch (no KV cache)", unit="sentences/s",
                    ratio=round_ratio(ours_runs, ref_runs, k, "sentences_per_s"))
    floor("attention time and memory at every L no worse than PyTorch's", scaling_ok, "see the table")

    # what driving ember from Python costs (bench/python_overhead.py): a small op and its
    # backward against PyTorch's in the same process, the translator's training step from
    # Python against the same step in C++
    if os.path.exists(f"{work}/python_overhead.json"):
        po = load(f"{work}/python_overhead.json")
        op, backward, step = po["rows"]
        add("python", op["workload"], "[8] float32", op["ember"], op["torch"], "PyTorch", unit="us")
        add("python", backward["workload"], "[8] float32", backward["ember"], backward["torch"], "PyTorch", unit="us")
        add("python", step["workload"], "date model", step["python"], step["cpp"], "C++ (bench_suite)",
            ratio=step["ratio"])
        # the smoke measurement: the add 1.2-1.3x PyTorch's time, its backward 0.35x
        floor("a small op from Python, and its backward, at most 1.5x PyTorch's time", max(op["ratio"],
              backward["ratio"]) <= 1.5, f"add {op['ratio']:.2f}x, add + backward {backward['ratio']:.2f}x")
        floor("the training step driven from Python within 10% of C++'s time", step["ratio"] <= 1.10,
              f"{step['ratio']:.3f}x ({step['python']:.1f} ms against {step['cpp']:.1f} ms, {po['threads']} threads)")
    else:
        floor("Python's overhead measured", False, "no python_overhead.json")

    # Hessian-vector products (bench_suite hvp): forward-over-reverse against
    # reverse-over-reverse, time and the peak bytes of tensors each adds
    if os.path.exists(f"{work}/hvp.json"):
        by = {(r["workload"], r["shape"]): r for r in load(f"{work}/hvp.json")["results"]}
        for (workload, shape), fwd in by.items():
            if workload != "hvp forward-over-reverse":
                continue
            rev = by[("hvp reverse-over-reverse", shape)]
            add("hvp", workload, shape, fwd["ms"], rev["ms"], "reverse-over-reverse")
            add("hvp", workload + ", peak tensors", shape, fwd["peak_MB"], rev["peak_MB"], "reverse-over-reverse",
                unit="MB")

    # per-example gradients (bench_suite per-sample) against the loop of B backward passes
    if os.path.exists(f"{work}/per_sample.json"):
        by = {r["workload"]: r for r in load(f"{work}/per_sample.json")["results"]}
        fast, slow = by["per-sample gradients"], by["per-sample gradients by a loop"]
        ratio = add("per-sample", "per-sample gradients", fast["shape"], fast["ms"], slow["ms"], "a loop of backward passes")
        add("per-sample", "per-sample gradients, peak tensors", fast["shape"], fast["peak_MB"], slow["peak_MB"],
            "a loop of backward passes", unit="MB")
        floor("per-example gradients at least 5x faster than the loop of 64 backward passes", ratio <= 0.2,
              f"{1 / ratio:.1f}x ({fast['ms']:.0f} ms against {slow['ms']:.0f} ms; {fast['peak_MB']:.0f} MB of tensors "
              f"at the peak against {slow['peak_MB']:.0f} MB)")
    else:
        floor("per-example gradients measured", False, "no per_sample.json")

    # the watch's curvature measurement (bench_suite curvature) against the training step:
    # its share of training time at --watch-curvature 500
    if os.path.exists(f"{work}/curvature.json"):
        by = {r["workload"]: r for r in load(f"{work}/curvature.json")["results"]}
        m, step = by["watch curvature measurement"], by["training step"]
        ratio = add("curvature", "watch curvature measurement", m["shape"], m["ms"], step["ms"], "a training step")
        floor("the watch's curvature at --watch-curvature 500 at most 10% of training time", ratio / 500 <= 0.10,
              f"{100 * ratio / 500:.1f}% (a measurement {m['ms']:.0f} ms, {ratio:.0f} training steps of {step['ms']:.1f} ms)")
    else:
        floor("the watch's curvature measured", False, "no curvature.json")

    # the allocator's policy: the default Keep (malloc tuned, large blocks cached) against
    # System (plain malloc and free), on the same training step
    if os.path.exists(f"{work}/train_system.json"):
        system = {(r["workload"], r["shape"]): r for r in load(f"{work}/train_system.json")["results"]}
        for r in merged(rounds_of("train")).values():
            s = system.get((r["workload"], r["shape"]))
            if s and r["workload"].startswith("training step"):
                add("train", "training step, allocator Keep (System as reference)", r["shape"], r["ms"], s["ms"],
                    "AllocatorPolicy::System")

    # a training run's peak memory and the allocation counter
    ours, theirs = rss_mb(f"{work}/ember_run.time"), rss_mb(f"{work}/torch_run.time")
    add("train", "peak RSS of a 300-step run", "date model", ours, theirs, "PyTorch", unit="MB")
    log = open(f"{work}/ember_run.log").read()
    m = re.search(r"the allocator holds (\d+) MB; (\d+) of (\d+) training steps after step 100 took no memory from "
                  r"the system \(the other (\d+): (\d+) KB in all\)", log)
    floor("peak memory of a training run at most 150 MB", ours <= 150, f"{ours:.0f} MB")
    if m:
        held, quiet, steps, grew, kb = (int(g) for g in m.groups())
        # a step takes memory only when its batch outgrows every earlier one: rare, and small
        floor("no new memory per step in steady state", grew <= 0.02 * steps,
              f"{quiet} of {steps} steps after step 100 took no memory from the system; {grew} took {kb} KB "
              f"in all, of {held} MB held")
    else:
        floor("no new memory per step in steady state", False, "counter not found")

    # the main job's recipe to 99.5% (translate train's defaults; the same recipe in PyTorch)
    if os.path.exists(f"{work}/converge.json"):
        c = load(f"{work}/converge.json")
        add("train", "training time to 99.5% exact", "date model", c["ember"]["train_s"], c["torch"]["train_s"],
            "PyTorch", unit="s")
        add("train", "steps to 99.5% exact", "date model", c["ember"]["steps"], c["torch"]["steps"], "PyTorch",
            unit="steps")
        floor("the main job to 99.5% validation exact match in at most 45 s of training", c["ember"]["train_s"] <= 45,
              f"{c['ember']['train_s']:.1f} s, {c['ember']['steps']} steps (PyTorch: {c['torch']['train_s']:.0f} s)")

    # every row against PyTorch: times and memory at most PyTorch's, rates at least
    # (steps to a target count how fast each run learns with its seed, not how fast it computes)
    # (the Python overhead rows have their floor above: a call from Python into ember is not
    # meant to beat PyTorch's own dispatch)
    slower = [f"{r['workload']} {r['shape']} ({r['ratio']:.2f})" for r in rows if r["reference_name"].startswith("PyTorch")
              and r["group"] != "python" and r["unit"] != "steps"
              and (r["ratio"] < 1 if r["unit"].endswith("/s") else r["ratio"] > 1)]
    floor("every workload measured against PyTorch at least as fast as PyTorch (and no more memory)", not slower,
          "slower: " + ", ".join(slower) if slower else "see the table")

    print(f"\n{'workload':<34} {'shape':<26} {'ember':>10} {'reference':>10} {'unit':<12} {'ratio':>6} {'GF/s':>7} {'ref GF/s':>8}")
    for r in rows:
        gf = f"{r['ember_gflops']:7.1f}" if r["ember_gflops"] else " " * 7
        rg = f"{r['reference_gflops']:8.1f}" if r["reference_gflops"] else " " * 8
        print(f"{r['workload']:<34} {r['shape']:<26} {r['ember']:10.3f} {r['reference']:10.3f} {r['unit']:<12} "
              f"{r['ratio']:6.2f} {gf} {rg}")
    print("\nfloors:")
    for f in floors:
        print(f"  [{'holds' if f['holds'] else 'MISSED'}] {f['floor']}: {f['detail']}")
    machine = dict(cpu=cpu_name(), cores=os.cpu_count(), threads=2,
                   openblas_coretype=os.environ.get("OPENBLAS_CORETYPE", "(not set)"),
                   date=datetime.date.today().isoformat())
    with open(out, "w") as f:
        json.dump(dict(machine=machine, rows=rows, floors=floors), f, indent=1)
    # the same table in Markdown, for the README
    md = os.path.splitext(out)[0] + ".md"
    with open(md, "w") as f:
        f.write(f"{machine['cpu']}, {machine['cores']} cores, 2 threads, {machine['date']}\n\n")
        f.write("| workload | shape | ember | reference | unit | ratio | GFLOP/s | ref GFLOP/s |\n")
        f.write("|---|---|---:|---:|---|---:|---:|---:|\n")
        for r in rows:
            gf = f"{r['ember_gflops']:.0f}" if r["ember_gflops"] else ""
            rg = f"{r['reference_gflops']:.0f}" if r["reference_gflops"] else ""
            f.write(f"| {r['workload']} | {r['shape']} | {r['ember']:.4g} | {r['reference']:.4g} "
                    f"({r['reference_name']}) | {r['unit']} | {r['ratio']:.2f} | {gf} | {rg} |\n")
        f.write("\n")
        for fl in floors:
            f.write(f"- {'holds' if fl['holds'] else '**missed**'}: {fl['floor']} ({fl['detail']})\n")
    print(f"\nmachine: {machine['cpu']}, {machine['cores']} cores; wrote {out} and {md}")


if __name__ == "__main__":
    main()
