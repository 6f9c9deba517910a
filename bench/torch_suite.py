#!/usr/bin/python3
"""PyTorch's side of bench_suite: the same workloads, timed the same way.

    torch_suite.py ops [--json FILE]
    torch_suite.py train --data DIR --ref TORCH_TRANSLATE_REF [--precision fp32|bf16] [--json FILE]
    torch_suite.py big [--precision fp32|bf16] [--steps N] [--json FILE]
    torch_suite.py attn-mem L

ops:      LayerNorm, softmax and cross-entropy forward+backward at the shapes bench_suite
          uses; nn.MultiheadAttention forward+backward for L = 64 .. 1024 at B = 4, E = 256,
          H = 4 (need_weights=False, dropout 0).
train:    one training step of the date translator, with the model of the reference script
          (../shared/bench/torch_translate_ref.py, imported from --ref), on batches of 64
          consecutive pairs of DIR/train.tsv; greedy decoding throughput of DIR/valid.tsv
          with that script's evaluate() (batches of 500, no key/value cache). --precision
          bf16: forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), backward
          outside it (as PyTorch's documentation has it), and no decoding.
big:      one training step of bench_suite big's larger model: nn.Transformer (d_model 512,
          8 heads, 6+6 layers, FFN 2048, dropout 0.1, post-norm as ember's, batch_first)
          with embeddings and an output projection, batch 32 of 48-token sources and targets
          (vocabularies of 64, no padding), Adam, cross-entropy over the target: the median
          of N steps after 2 untimed ones (bf16 as for train), the GFLOP/s of its matrix
          products (counted from the shapes, as ember's kernel::matmul_flops counts them:
          2 M N K a product, forward and both backward products), and the process's peak
          resident memory.
attn-mem: one MultiheadAttention forward+backward at [4, L, 256, 4] in this fresh process;
          prints the peak resident memory it added, in MB.
Times are medians over at least 5 runs and 0.3 s, after 3 untimed ones (train: the mean
over 50 batches, as bench_suite's). Run with Debian's /usr/bin/python3 (python3-torch);
threads from OMP_NUM_THREADS (default 2).
"""
import argparse
import importlib.util
import json
import math
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


def run_train(data, ref_path, bf16=False):
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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
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
    rows = [row("training step bf16 (batch 64)" if bf16 else "training step (batch 64)", "date model",
                s * 1e3 / len(batches), tokens_per_s=tokens / s)]
    if bf16:
        return rows
    ms = median_ms(lambda: ref.evaluate(model, vocab, val), 3, 1.0)
    rows.append(row("greedy decoding", f"{len(val)} sentences", ms, sentences_per_s=len(val) / (ms * 1e-3)))
    return rows


def sinusoid(length, d):
    """the sinusoidal positional table [length, d] of "Attention Is All You Need", as ember's"""
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(length, d)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


BIG_BATCH, BIG_LENGTH, BIG_VOCAB = 32, 48, 64  # bench_suite big's
BIG = dict(d=512, heads=8, layers=6, ff=2048, dropout=0.1)


class BigModel(nn.Module):
    """bench_suite big's model: embeddings times sqrt(d_model) plus sinusoidal positions,
    dropout, nn.Transformer (post-norm), output projection"""

    def __init__(self, vocab, d, heads, layers, ff, dropout, max_len):
        super().__init__()
        self.d = d
        self.src_emb = nn.Embedding(vocab, d, padding_idx=0)
        self.tgt_emb = nn.Embedding(vocab, d, padding_idx=0)
        for emb in (self.src_emb, self.tgt_emb):  # N(0, 1/d_model), as ember's
            nn.init.normal_(emb.weight, 0.0, d ** -0.5)
        self.register_buffer("pe", sinusoid(max_len, d), persistent=False)
        self.register_buffer("causal", torch.triu(torch.full((max_len, max_len), float("-inf")), diagonal=1),
                             persistent=False)
        self.drop = nn.Dropout(dropout)
        self.tf = nn.Transformer(d, heads, layers, layers, ff, dropout, batch_first=True, norm_first=False)
        # ember's post-norm stacks end at their last layer's LayerNorm; nn.Transformer's add one more each
        self.tf.encoder.norm = None
        self.tf.decoder.norm = None
        self.out = nn.Linear(d, vocab)

    def embed(self, emb, x):
        return self.drop(emb(x) * math.sqrt(self.d) + self.pe[: x.size(1)])

    def forward(self, src, tgt_in):
        mem = self.tf.encoder(self.embed(self.src_emb, src))
        T = tgt_in.size(1)
        return self.out(self.tf.decoder(self.embed(self.tgt_emb, tgt_in), mem, tgt_mask=self.causal[:T, :T]))


def big_matmul_flops(B, S, T, d, layers, ff, vocab, **_):
    """every matrix product of a training step, 2 M N K each: the forward's, and two products
    in the backward for each (every product here has both operands needing a gradient)"""
    N, M = B * T, B * S  # target and source rows
    encoder = 2 * M * d * 3 * d + 2 * M * d * d + 4 * M * d * ff + 4 * B * S * S * d
    decoder = (2 * N * d * 3 * d + 2 * N * d * d + 4 * B * T * T * d  # self-attention
               + 2 * N * d * d + 2 * M * d * 2 * d + 2 * N * d * d + 4 * B * T * S * d  # cross-attention
               + 4 * N * d * ff)
    return 3.0 * (layers * (encoder + decoder) + 2 * N * d * vocab)


def run_big(bf16, steps):
    torch.manual_seed(1)
    model = BigModel(BIG_VOCAB, max_len=BIG_LENGTH, **BIG)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    # token ids in [1, 64): no padding, as bench_suite big's
    src, tgt_in, tgt_out = (torch.randint(1, BIG_VOCAB, (BIG_BATCH, BIG_LENGTH)) for _ in range(3))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.reshape(-1, BIG_VOCAB), tgt_out.reshape(-1))
        loss.backward()
        opt.step()
    for _ in range(2):
        step()
    ms = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    median = ms[len(ms) // 2]
    flops = big_matmul_flops(BIG_BATCH, BIG_LENGTH, BIG_LENGTH, vocab=BIG_VOCAB, **BIG)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"parameters: {params * 1e-6:.1f}M; matrix products: {flops * 1e-9:.1f} GFLOP a step (counted from the "
          f"shapes); steps {ms[0]:.0f} .. {ms[-1]:.0f} ms; peak resident memory {rss:.0f} MB")
    return [row("larger model step bf16" if bf16 else "larger model step fp32", "[32,48] d512 6+6 layers", median,
                flops / (median * 1e6), tokens_per_s=BIG_BATCH * BIG_LENGTH / (median * 1e-3), peak_rss_MB=rss)]


def attention_memory(L):
    torch.manual_seed(3)
    step = mha_case(4, L, 256, 4)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()
    print(f"{(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024:.2f}")


def main():
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["ops", "train", "big", "attn-mem"])
    ap.add_argument("L", nargs="?", type=int)
    ap.add_argument("--json")
    ap.add_argument("--data", default="data/dates")
    ap.add_argument("--ref", default="../shared/bench/torch_translate_ref.py")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="train, big: bf16 runs forward and loss under torch.autocast (bfloat16)")
    ap.add_argument("--steps", type=int, default=5, help="big: timed steps, after 2 untimed ones")
    a = ap.parse_args()
    if a.steps < 1:
        ap.error(f"--steps needs a positive integer, got {a.steps}")
    if a.what == "attn-mem":
        if not a.L or a.L <= 0:
            ap.error("attn-mem needs a positive L")
        attention_memory(a.L)
        return
    print(f"threads: {torch.get_num_threads()}")
    bf16 = a.precision == "bf16"
    if a.what == "ops":
        rows = run_ops()
    elif a.what == "big":
        rows = run_big(bf16, a.steps)
    else:
        rows = run_train(a.data, a.ref, bf16)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(torch=torch.__version__, threads=torch.get_num_threads(), results=rows), f, indent=1)


if __name__ == "__main__":
    main()
