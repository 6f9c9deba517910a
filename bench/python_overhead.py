#!/usr/bin/python3
"""What driving ember from Python costs, in one invocation: the per-op overhead of a small
op (add of two 8-element float32 tensors) and of a backward through it, ember against
PyTorch in the same process; and the date translator's training step driven from Python
(examples/translate/train.py's model, Adam, cross-entropy) against the same step in C++
(bench_suite train: the same model, batches, optimizer and threads).

    OMP_NUM_THREADS=2 python_overhead.py --bench-suite build/bench/bench_suite --data data/dates [--json FILE]
        [--op-reps N] [--rounds R] [--steps N]

Run with PYTHONPATH naming the built package (build/python). Times are medians over the
rounds; the training step's ratio is the median of the rounds' ratios (Python's, then
C++'s, alternating, so that a slower stretch of the machine weighs on both).
"""

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def per_call_us(fn, reps):
    """Microseconds a call of fn, over reps calls after a warm-up."""
    for _ in range(min(reps, 100)):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def op_overhead(module, reps, rounds):
    """(add us, backward-through-add us) of a framework (ember or torch), medians."""
    a = module.ones(8, dtype=module.float32)
    b = module.ones(8, dtype=module.float32)
    x = module.ones(8, dtype=module.float32, requires_grad=True)
    y = module.ones(8, dtype=module.float32)
    g = module.ones(8, dtype=module.float32)

    def add():
        module.add(a, b)

    def backward():  # the add's forward with autograd, then its backward
        x.grad = None
        module.add(x, y).backward(g)

    forward = median([per_call_us(add, reps) for _ in range(rounds)])
    with_backward = median([per_call_us(backward, reps) for _ in range(rounds)])
    return forward, with_backward


def translator_module(root):
    spec = importlib.util.spec_from_file_location("translate_train", os.path.join(root, "examples/translate/train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python_step_ms(root, data, steps):
    """bench_suite train's step from Python: d_model 128, 4 heads, ffn 512, 2+2 layers,
    max_len 64, batches of 64 consecutive pairs, Adam (lr 1e-4); 5 warm-up steps."""
    import ember
    from ember.nn import functional as F
    t = translator_module(root)
    pairs = t.read_pairs(os.path.join(data, "train.tsv"))
    src_vocab = t.CharVocab.build([s for s, _ in pairs])
    tgt_vocab = t.CharVocab.build([x for _, x in pairs])
    examples = [(src_vocab.encode(s), tgt_vocab.encode(x)) for s, x in pairs]
    batches = [t.make_batch(examples[i:i + 64]) for i in range(0, min(len(examples) - 63, 50 * 64), 64)]
    cfg = {"src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab), "d_model": 128, "nhead": 4,
           "num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": 512, "dropout": 0.1,
           "max_len": 64, "pad_id": 0}
    ember.manual_seed(1)
    init_gen = ember.Generator(1)
    DateTranslator, xavier_init = t._modules()
    model = DateTranslator(cfg, init_gen)
    xavier_init(model, init_gen)
    opt = ember.optim.Adam(model.named_parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    state = {"next": 0}

    def step():
        src, tgt_in, tgt_out = batches[state["next"] % len(batches)]
        state["next"] += 1
        opt.zero_grad()
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, cfg["tgt_vocab"]), tgt_out.reshape(-1), ignore_index=0)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    state["next"] = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) * 1e3 / steps


def cpp_step_ms(bench_suite, data, steps, threads):
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "train.json")
        subprocess.run([bench_suite, "train", "--data", data, "--threads", str(threads), "--steps-only", str(steps),
                        "--json", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            rows = json.load(f)["results"]
    return next(r["ms"] for r in rows if r["workload"].startswith("training step"))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench-suite", default=os.path.join(root, "build/bench/bench_suite"))
    p.add_argument("--data", default=os.path.join(root, "data/dates"))
    p.add_argument("--json", default="")
    p.add_argument("--op-reps", type=int, default=20000, help="calls per timing of a small op")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    p.add_argument("--steps", type=int, default=50, help="training steps per timing")
    args = p.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import ember
    import torch
    torch.set_num_threads(threads)

    ours_add, ours_bwd = op_overhead(ember, args.op_reps, args.rounds)
    torch_add, torch_bwd = op_overhead(torch, args.op_reps, args.rounds)
    py_ms, cpp_ms, ratios = [], [], []
    for _ in range(args.rounds):
        py_ms.append(python_step_ms(root, args.data, args.steps))
        cpp_ms.append(cpp_step_ms(args.bench_suite, args.data, args.steps, threads))
        ratios.append(py_ms[-1] / cpp_ms[-1])
    rows = [
        dict(workload="add, 8 float32 (us a call)", ember=ours_add, torch=torch_add, ratio=ours_add / torch_add),
        dict(workload="add + backward, 8 float32 (us a call)", ember=ours_bwd, torch=torch_bwd,
             ratio=ours_bwd / torch_bwd),
        dict(workload=f"translator training step, {threads} threads (ms): Python / C++", python=median(py_ms),
             cpp=median(cpp_ms), ratio=median(ratios)),
    ]
    for r in rows:
        values = "  ".join(f"{k} {v:.3f}" for k, v in r.items() if k not in ("workload", "ratio"))
        print(f"{r['workload']:<48} {values}  ratio {r['ratio']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(threads=threads, rounds=args.rounds, op_reps=args.op_reps, steps=args.steps, rows=rows), f,
                      indent=1)


if __name__ == "__main__":
    sys.exit(main())
