#!/usr/bin/python3
"""PyTorch's side of bench_suite: the same workloads, timed the same way.

    torch_suite.py ops [--json FILE]
    torch_suite.py train --data DIR --ref TORCH_TRANSLATE_REF [--json FILE]
    torch_suite.py attn-mem L

ops:      LayerNorm, softmax and cross-entropy forward+backward at the shapes bench_suite
          uses; nn.MultiheadAttention forward+backward for L = 64 .. 1024 at B = 4, E = 256,
          H = 4 (need_weights=False, dropout 0).
train:    one training step of the date translator, with the model of the reference script
          (../shared/bench/torch_translate_ref.py, imported from --ref), on batches of 64
          consecutive pairs of DIR/train.tsv; greedy decoding throughput of DIR/valid.tsv
          with that script's evaluate() (batches of 500, no key/value cache).
attn-mem: one MultiheadAttention forward+backward at [4, L, 256, 4] in this fresh process;
          prints the peak resident memory it added, in MB.
Times are medians over at least 5 runs and 0.3 s, after 3 untimed ones. Run with
Debian's /usr/bin/python3 (python3-torch); threads from OMP_NUM_THREADS (default 2).
"""
import argparse
import importlib.util
import json
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def median_ms(fn, min_runs=5, min_seconds=0.3):
    for _ in range(3):
        fn()
    ms, total = [], 0.0
    while len(ms) < min_runs or total < min_seconds:
        t0 = time.perf_counter()
        fn()
        s = time.perf_counter() - t0
        ms.append(s * 1e3)
        total += s
    ms.sort()
    return ms[len(ms) // 2]


def shape_of(*dims):
    return "[" + ",".join(str(d) for d in dims) + "]"


def row(workload, shape, ms, gflops=0.0, **extra):
    r = dict(workload=workload, shape=shape, ms=ms, gflops=gflops, **extra)
    line = f"{workload:<26} {shape:<22} {ms:10.3f} ms"
    if gflops:
        line += f"  {gflops:7.1f} GF/s"
    for k, v in extra.items():
        line += f"  {v:.1f} {k}"
    print(line, flush=True)
    return r


def mha_case(B, L, E, H):
    mha = nn.MultiheadAttention(E, H, dropout=0.0, batch_first=True)
    mha.train()
    x = torch.randn(B, L, E, requires_grad=True)
    gy = torch.randn(B, L, E)

    def step():
        y, _ = mha(x, x, x, need_weights=False)
        y.backward(gy)
        x.grad = None
        for p in mha.parameters():
            p.grad = None
    return step


def run_ops():
    rows = []
    for N, C in [(64 * 32, 128), (8 * 256, 512)]:
        x = torch.randn(N, C, requires_grad=True)
        w = torch.ones(C, requires_grad=True)
        b = torch.zeros(C, requires_grad=True)
        gy = torch.randn(N, C)

        def f():
            F.layer_norm(x, (C,), w, b).backward(gy)
            x.grad = w.grad = b.grad = None
        rows.append(row("layer_norm fwd+bwd", shape_of(N, C), median_ms(f)))
    for s in [(64, 4, 32, 32), (8, 8, 256, 256)]:
        x = torch.randn(*s, requires_grad=True)
        gy = torch.randn(*s)

        def f():
            torch.softmax(x, -1).backward(gy)
            x.grad = None
        rows.append(row("softmax fwd+bwd", shape_of(*s), median_ms(f)))
    for N, V in [(64 * 11, 64), (4096, 8192)]:
        z = torch.randn(N, V, requires_grad=True)
        t = torch.randint(0, V, (N,))

        def f():
            F.cross_entropy(z, t).backward()
            z.grad = None
        rows.append(row("cross_entropy fwd+bwd", shape_of(N, V), median_ms(f)))
    for L in [64, 128, 256, 512, 1024]:
        ms = median_ms(mha_case(4, L, 256, 4))
        flops = 3.0 * (8.0 * 4 * L * 256 * 256 + 4.0 * 4 * L * L * 256)
        rows.append(row("attention L-scaling", shape_of(4, L, 256, 4), ms, flops / (ms * 1e6)))
    return rows


def read_pairs(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                s, t = line.split("\t")
                pairs.append((s, t))
    return pairs


def run_train(data, ref_path):
    spec = importlib.util.spec_from_file_location("torch_translate_ref", ref_path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    train = read_pairs(os.path.join(data, "train.tsv"))
    val = read_pairs(os.path.join(data, "valid.tsv"))
    vocab = ref.Vocab([s for s, _ in train + val] + [t for _, t in train + val])
    torch.manual_seed(1)
    model = ref.Seq2Seq(len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=ref.PAD)
    batches = []
    for first in range(0, min(len(train) - 63, 50 * 64), 64):
        chunk = train[first:first + 64]
        src = ref.pad_batch([vocab.enc(s) + [ref.EOS] for s, _ in chunk])
        tgt_in = ref.pad_batch([[ref.BOS] + vocab.enc(t) for _, t in chunk])
        tgt_out = ref.pad_batch([vocab.enc(t) + [ref.EOS] for _, t in chunk])
        batches.append((src, tgt_in, tgt_out, int((tgt_out != ref.PAD).sum())))
    model.train()

    def step(b):
        src, tgt_in, tgt_out, _ = b
        opt.zero_grad(set_to_none=True)
        logits = model(src, tgt_in)
        loss = loss_fn(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1))
        loss.backward()
        opt.step()
    for b in batches[:5]:
        step(b)
    t0 = time.perf_counter()
    for b in batches:
        step(b)
    s = time.perf_counter() - t0
    tokens = sum(b[3] for b in batches)
    rows = [row("training step (batch 64)", "date model", s * 1e3 / len(batches), tokens_per_s=tokens / s)]
    ms = median_ms(lambda: ref.evaluate(model, vocab, val), 3, 1.0)
    rows.append(row("greedy decoding", f"{len(val)} sentences", ms, sentences_per_s=len(val) / (ms * 1e-3)))
    return rows


def attention_memory(L):
    torch.manual_seed(3)
    step = mha_case(4, L, 256, 4)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()
    print(f"{(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024:.2f}")


def main():
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["ops", "train", "attn-mem"])
    ap.add_argument("L", nargs="?", type=int)
    ap.add_argument("--json")
    ap.add_argument("--data", default="data/dates")
    ap.add_argument("--ref", default="../shared/bench/torch_translate_ref.py")
    a = ap.parse_args()
    if a.what == "attn-mem":
        if not a.L or a.L <= 0:
            ap.error("attn-mem needs a positive L")
        attention_memory(a.L)
        return
    print(f"threads: {torch.get_num_threads()}")
    rows = run_ops() if a.what == "ops" else run_train(a.data, a.ref)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(torch=torch.__version__, threads=torch.get_num_threads(), results=rows), f, indent=1)


if __name__ == "__main__":
    main()
