#!/usr/bin/env python3
"""Where a training step's time goes: the samples of a `perf record` of
`bench_suite train --steps-only N`, both threads together, sorted into the categories of
the README's profile table by the symbol they ran in.

    OMP_NUM_THREADS=2 perf record -g -o step.data build/bench/bench_suite train \\
        --data data/dates --steps-only 200
    bench/profile_step.py step.data MS_PER_STEP [THREADS]

prints one Markdown row per category: its share of the samples and its thread-ms a step
(the share times MS_PER_STEP times THREADS, default 2)."""
import re
import subprocess
import sys

# first match wins: a symbol is counted once
CATEGORIES = [
    ("matrix products (ember's panel and skinny kernels, OpenBLAS)", r"libopenblas|gemm_batched|Skinny|PanelTile|panel_gemm|transpose16|plan_product|gemm_serial|gemm_together"),
    ("threads waiting at barriers (libgomp)", r"libgomp"),
    ("attention: softmax, masks, dropout masks, tiles", r"tiled_|apply_keep|masked_softmax|attention|dropout_keep|row_keys"),
    ("copies and zero-fills", r"memmove|memset|memcpy|kernel::copy|clone"),
    ("elementwise ops (add, mul, where, relu)", r"binary_forward|scalar_forward|where|map[123]<|walk_range"),
    ("LayerNorm", r"layer_norm"),
    ("dropout", r"dropout"),
    ("Adam", r"Adam|adam"),
    ("bias gradients (column sums)", r"sum_rows|reduce"),
    ("allocation (malloc, free)", r"malloc|free|_int_|unlink_chunk|operator new|operator delete|Allocator|storage"),
]


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    data, ms = sys.argv[1], float(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) == 4 else 2
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol", "--stdio",
                             "-g", "none"], capture_output=True, text=True, check=True).stdout
    shares = {name: 0.0 for name, _ in CATEGORIES}
    rest = 0.0
    for line in report.splitlines():
        m = re.match(r"\s+([0-9.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
        if not m:
            continue
        share, where = float(m.group(1)), m.group(2) + " " + m.group(3)
        for name, pattern in CATEGORIES:
            if re.search(pattern, where):
                shares[name] += share
                break
        else:
            rest += share
    for name, _ in CATEGORIES + [("the engine and the rest", None)]:
        share = shares.get(name, rest)
        print(f"| {name} | {share:.1f}% | {share / 100 * threads * ms:.1f} |")


if __name__ == "__main__":
    main()
