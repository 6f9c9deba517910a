#!/usr/bin/python3
"""Translate with a date-translator checkpoint in PyTorch instead of ember.

Reads a checkpoint written by `translate train` with h5py, builds torch.nn.Transformer
with the two embeddings, the sinusoidal positional encoding and the output projection
exactly as docs/checkpoint-format.md ("Loading a translator into PyTorch") describes,
copies ember's parameters in, and decodes greedily as `translate decode` does:

    python3 examples/translate/load_in_torch.py --checkpoint C [TEXT ...]

prints one translation a line (each line of standard input when no TEXT is given). A bad
input (empty, too long, a character outside the vocabulary) is reported on stderr and
leaves an empty line; the exit code is then 1. Computes in float64 unless --float32.
Needs numpy, h5py and torch (Debian: python3-h5py python3-torch).
"""
import argparse
import math
import sys
import warnings

import h5py
import numpy as np
import torch

PAD, BEGIN, END, UNK = 0, 1, 2, 3  # the first four tokens of both vocabularies
# the encoder's fast path packs padded batches into nested tensors, and says so on every call
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")


def read_checkpoint(path):
    """The configuration, the parameters by ember's dotted names and both vocabularies."""
    with h5py.File(path, "r") as f:
        cfg = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f["config"].attrs.items()}
        weights = {name: np.asarray(d) for name, d in f["model"].items()}
        vocab = {side: list(f["vocab"][side].asstr()[:]) for side in ("source", "target")}
    return cfg, weights, vocab


def torch_names(weights, score_scale=1.0):
    """ember's parameter names -> Translator's: q, k and v packed into in_proj. PyTorch
    scales scores by 1/sqrt(d_k) only: a checkpoint's score_scale (absent: 1) goes into
    the query projection, which gives the same scores."""
    out = {}
    for name, w in weights.items():
        if name.startswith(("src_embed.", "tgt_embed.", "out_proj.")):
            out[name] = w
            continue
        parts = name.split(".")
        if parts[-2] in ("q_proj", "k_proj"):
            continue  # packed below, with v_proj
        if parts[-2] == "v_proj":
            attn, kind = ".".join(parts[:-2]), parts[-1]
            packed = [weights[f"{attn}.{p}_proj.{kind}"] * (score_scale if p == "q" else 1.0) for p in "qkv"]
            name, w = f"{attn}.in_proj_{kind}", np.concatenate(packed)
        name = name.replace(".cross_attn.", ".multihead_attn.").replace(".ffn.", ".")
        out["transformer." + name] = w
    return out


class Translator(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.d_model = d = cfg["d_model"]
        self.src_embed = torch.nn.Embedding(cfg["src_vocab"], d)
        self.tgt_embed = torch.nn.Embedding(cfg["tgt_vocab"], d)
        self.transformer = torch.nn.Transformer(
            d, cfg["nhead"], cfg["num_encoder_layers"], cfg["num_decoder_layers"], cfg["dim_feedforward"],
            dropout=0.0, activation=cfg["activation"], layer_norm_eps=1e-5, batch_first=True,
            norm_first=bool(cfg["norm_first"]))
        if not cfg["norm_first"]:  # ember's post-norm stacks end without a LayerNorm
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.out_proj = torch.nn.Linear(d, cfg["tgt_vocab"])
        # pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(pos / 10000^(2i/d)); not in the file
        pos = torch.arange(cfg["max_len"], dtype=torch.float64)[:, None]
        angle = pos / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        pe = torch.zeros(cfg["max_len"], d, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)[:, : d // 2]
        self.register_buffer("pe", pe, persistent=False)

    def embed(self, table, ids):  # ids [B, L] -> [B, L, d]
        return table(ids) * math.sqrt(self.d_model) + self.pe[: ids.size(1)]


@torch.no_grad()
def greedy_decode(model, sources, steps):
    """Ids of each source (without specials) -> ids of its translation, as translate decode."""
    width = max(len(s) for s in sources) + 1
    src = torch.tensor([s + [END] + [PAD] * (width - len(s) - 1) for s in sources])
    pad = src == PAD
    memory = model.transformer.encoder(model.embed(model.src_embed, src), src_key_padding_mask=pad)
    tgt = torch.full((len(sources), 1), BEGIN)
    out, done = [[] for _ in sources], [False] * len(sources)
    for _ in range(steps):
        causal = torch.triu(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool), 1)
        h = model.transformer.decoder(model.embed(model.tgt_embed, tgt), memory, tgt_mask=causal,
                                      memory_key_padding_mask=pad)
        best = model.out_proj(h[:, -1]).argmax(-1)
        for i, token in enumerate(best.tolist()):
            if not done[i]:
                done[i] = token == END
                if not done[i]:
                    out[i].append(token)
        if all(done):
            break
        tgt = torch.cat([tgt, best[:, None]], 1)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--float32", action="store_true", help="compute in float32 (default float64)")
    parser.add_argument("text", nargs="*", help="dates to translate (default: each line of stdin)")
    args = parser.parse_args()
    cfg, weights, vocab = read_checkpoint(args.checkpoint)
    if cfg.get("qk_norm", 0):
        raise SystemExit(f"load_in_torch.py: '{args.checkpoint}': qk_norm is 1; torch.nn.Transformer has no "
                         "normalisation of queries and keys")
    model = Translator(cfg)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in torch_names(weights, cfg.get("score_scale", 1.0)).items()}, strict=True)
    model.to(torch.float32 if args.float32 else torch.float64).eval()

    lines = args.text
    if not lines:
        lines = sys.stdin.buffer.read().decode("utf-8", "surrogateescape").removeprefix("\ufeff").split("\n")
        lines = [line.removesuffix("\r") for line in (lines[:-1] if lines[-1] == "" else lines)]
    src_ids = {c: i for i, c in enumerate(vocab["source"]) if i > UNK}
    good, errors = {}, 0
    for n, line in enumerate(lines):
        unknown = [f"'{c}' at position {k + 1}" for k, c in enumerate(line) if c not in src_ids]
        bad = None
        if not line:
            bad = "the input is empty"
        elif unknown:
            bad = f"character {unknown[0]} is not in the vocabulary"
        elif len(line) > cfg["max_len"] - 1:
            bad = f"the input has {len(line)} characters; this model reads at most {cfg['max_len'] - 1}"
        if bad:
            errors += 1
            print(f"load_in_torch: input {n + 1}: {bad}", file=sys.stderr)
        else:
            good[n] = [src_ids[c] for c in line]
    outputs = dict(zip(good, greedy_decode(model, list(good.values()), cfg["max_len"] - 1))) if good else {}
    text = lambda ids: "".join("?" if i == UNK else vocab["target"][i] for i in ids if i not in (PAD, BEGIN))
    for n in range(len(lines)):
        print(text(outputs[n]) if n in outputs else "")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
