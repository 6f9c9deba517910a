"""The date translator of examples/translate, written in Python over ember's C++ layers.

The model is an ember.nn.Module composed the way nn::Transformer composes itself
(nn/transformer.h): source and target embeddings scaled by sqrt(d_model), the sinusoidal
positional table, dropout, a stack of TransformerEncoderLayers on the source's packed
rows (ember.nn.Packing), a stack of causal TransformerDecoderLayers and a Linear to the
target vocabulary. Everything around it is the translator's (train.cpp, lib/seq2seq,
lib/text): the character vocabularies, the padded batches, the three generators and the
order of their draws, the initialisation, the loss, Adam with betas (0.9, 0.98) and eps
1e-9, the warm-up schedules and the data order. With the same options and seed it trains
to the same bits as `translate train`: the same loss at every step and the same
parameters after the last one.

ember is imported once the command line is read, so that --threads can set the size of
its thread pool first; the model's classes are defined then (_modules).

Its checkpoints are the translator's (docs/checkpoint-format.md): `translate decode`,
`translate eval` and `translate train --resume` read what this script writes, and this
script resumes from (or decodes with) what `translate train` writes.

    python3 examples/translate/train.py train --steps 100 --out runs/py-dates
    python3 examples/translate/train.py train --resume runs/dates/ckpt-00000050.h5 --steps 100
    python3 examples/translate/train.py decode --checkpoint runs/py-dates/ckpt-00000100.h5 "22/11/2026"

Run it from the repository's root with PYTHONPATH naming the built package (build/python);
docs/python-translator.md says more.
"""

import argparse
import math
import os
import sys
import time

PAD, BEGIN, END, UNKNOWN = 0, 1, 2, 3
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


# ------------------------------------------------------------------ data (lib/text, lib/seq2seq)

def read_pairs(path):
    """(source, target) pairs of a "source<TAB>target" file, as text::read_pairs reads it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    pairs = []
    for number, line in enumerate(lines, 1):
        line = line[:-1] if line.endswith("\r") else line
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"{path}:{number}: expected 'source<TAB>target', got {line!r}")
        pairs.append((parts[0], parts[1]))
    return pairs


class CharVocab:
    """<pad> = 0, <s> = 1, </s> = 2, <unk> = 3, then the characters in code-point order."""

    def __init__(self, tokens):
        if tokens[:4] != SPECIALS:
            raise ValueError(f"CharVocab: the first tokens must be {SPECIALS}, got {tokens[:4]}")
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens) if i >= 4}

    @classmethod
    def build(cls, texts):
        return cls(SPECIALS + sorted({c for t in texts for c in t}))

    def __len__(self):
        return len(self.tokens)

    def encode(self, text):
        try:
            return [self.ids[c] for c in text]
        except KeyError as e:
            raise ValueError(f"CharVocab.encode: character {e.args[0]!r} of {text!r} is not in the vocabulary")

    def decode(self, ids):
        out = []
        for i in ids:
            if i == END:
                break
            if i in (PAD, BEGIN):
                continue
            out.append(self.tokens[i] if 4 <= i < len(self.tokens) else "?")
        return "".join(out)


def pad_rows(rows, begin=None, end=None):
    """Rows of ids, each after `begin` and before `end` when given, padded with PAD."""
    full = [([begin] if begin is not None else []) + r + ([end] if end is not None else []) for r in rows]
    longest = max(len(r) for r in full)
    return [r + [PAD] * (longest - len(r)) for r in full]


def make_batch(examples):
    """seq2seq::make_batch: src = source + </s>, tgt_in = <s> + target, tgt_out = target +
    </s>, each [B, longest] int64."""
    import ember
    sources = [s for s, _ in examples]
    targets = [t for _, t in examples]
    return (ember.tensor(pad_rows(sources, end=END), dtype=ember.int64),
            ember.tensor(pad_rows(targets, begin=BEGIN), dtype=ember.int64),
            ember.tensor(pad_rows(targets, end=END), dtype=ember.int64))


# ------------------------------------------------------------------ the model (nn/transformer.h)

def _modules():
    """The model's classes, defined once ember is imported (after --threads is set)."""
    import ember
    from ember import nn
    from ember.nn import init

    def positional_table(d_model, max_len):
        """The sinusoidal table of "Attention Is All You Need" [max_len, d_model], computed
        as nn::PositionalEncoding computes it (float64 with the C library's sin and cos,
        then rounded to float32)."""
        table = []
        for pos in range(max_len):
            row = [0.0] * d_model
            for i in range(0, d_model, 2):
                angle = float(pos) / math.pow(10000.0, float(i) / float(d_model))
                row[i] = math.sin(angle)
                if i + 1 < d_model:
                    row[i + 1] = math.cos(angle)
            table.append(row)
        return ember.tensor(table, dtype=ember.float64).float()

    class Encoder(nn.Module):
        """The encoder stack, on the packed rows of the source's kept positions."""

        def __init__(self, cfg, init_gen, dropout_gen):
            super().__init__()
            self.layers = nn.ModuleList([
                nn.TransformerEncoderLayer(cfg["d_model"], cfg["nhead"], cfg["dim_feedforward"], cfg["dropout"],
                                           generator=init_gen, dropout_generator=dropout_gen)
                for _ in range(cfg["num_encoder_layers"])])

        def forward(self, rows, packing):  # rows [N, d_model]
            for layer in self.layers:
                rows = layer(rows, packing=packing)
            return rows

    class Decoder(nn.Module):
        """The decoder stack (causal), over the encoder's packed rows."""

        def __init__(self, cfg, init_gen, dropout_gen):
            super().__init__()
            self.layers = nn.ModuleList([
                nn.TransformerDecoderLayer(cfg["d_model"], cfg["nhead"], cfg["dim_feedforward"], cfg["dropout"],
                                           generator=init_gen, dropout_generator=dropout_gen)
                for _ in range(cfg["num_decoder_layers"])])

        # y: the target's packed rows with tgt_packing, else [B, T, d_model] with its padding mask
        def forward(self, y, memory, memory_packing, tgt_packing=None, tgt_padding=None):
            for layer in self.layers:
                y = layer(y, memory, tgt_key_padding_mask=tgt_padding, tgt_is_causal=True,
                          memory_packing=memory_packing, tgt_packing=tgt_packing)
            return y

    class DateTranslator(nn.Module):
        """nn::Transformer's encoder-decoder on token ids, composed of ember's layers: its
        parameters under the same names (src_embed.weight,
        encoder.layers.0.self_attn.q_proj.weight, ...), built with the same draws of
        init_gen in the same order, its forward the same calls in the same order (the
        encoder on the source's packed rows; the decoder on the target's when the target
        has no padding) - hence the same bits."""

        def __init__(self, cfg, init_gen=None, dropout_gen=None):
            super().__init__()
            self.cfg = dict(cfg)
            d, pad = cfg["d_model"], cfg["pad_id"]
            self.src_embed = nn.Embedding(cfg["src_vocab"], d, padding_idx=pad, generator=init_gen)
            self.tgt_embed = nn.Embedding(cfg["tgt_vocab"], d, padding_idx=pad, generator=init_gen)
            # N(0, 1/d_model): after the sqrt(d_model) scale, unit variance
            for e in (self.src_embed, self.tgt_embed):
                init.normal_(e.weight, 0.0, 1.0 / math.sqrt(d), init_gen)
                with ember.no_grad():
                    e.weight.select(0, pad).fill_(0.0)
            self.register_buffer("pe", positional_table(d, cfg["max_len"]), persistent=False)
            self.dropout = nn.Dropout(cfg["dropout"], generator=dropout_gen)
            self.encoder = Encoder(cfg, init_gen, dropout_gen)
            self.decoder = Decoder(cfg, init_gen, dropout_gen)
            self.out_proj = nn.Linear(d, cfg["tgt_vocab"], generator=init_gen)

        def encode(self, src):  # src [B, S] -> (memory rows [N, d_model], their Packing)
            packing = nn.Packing.of(src, self.cfg["pad_id"])
            x = self.src_embed(packing.pack(src)) * math.sqrt(self.cfg["d_model"])
            x = self.dropout(x + self.pe.index_select(0, packing.positions), packing=packing)
            return self.encoder(x, packing), packing

        def forward(self, src, tgt):  # src [B, S], tgt [B, T] -> logits [B, T, tgt_vocab]
            memory, memory_packing = self.encode(src)
            x = self.tgt_embed(tgt) * math.sqrt(self.cfg["d_model"])
            x = self.dropout(x + self.pe.narrow(0, 0, tgt.shape[1]))
            target = nn.Packing.of(tgt, self.cfg["pad_id"])
            if target.count > 0 and target.count == target.batch * target.length:  # no padding: rows
                y = self.decoder(target.pack(x), memory, memory_packing, tgt_packing=target)
                return target.unpack(self.out_proj(y))
            y = self.decoder(x, memory, memory_packing, tgt_padding=target.padding)
            return self.out_proj(y)

    def xavier_init(model, gen):
        """seq2seq::xavier_init: Xavier-uniform for every matrix of both stacks, in
        named_parameters order."""
        for name, p in model.named_parameters():
            if (name.startswith("encoder.") or name.startswith("decoder.")) and p.dim() > 1:
                init.xavier_uniform_(p, 1.0, gen)

    return DateTranslator, xavier_init


# ------------------------------------------------------------------ configuration (lib/seq2seq/model_options)

def model_config(args, src_vocab, tgt_vocab):
    """The checkpoint's /config of a new model: every attribute of seq2seq::to_config."""
    return {"src_vocab": src_vocab, "tgt_vocab": tgt_vocab, "d_model": args.d_model, "nhead": args.heads,
            "num_encoder_layers": args.enc_layers, "num_decoder_layers": args.dec_layers,
            "dim_feedforward": args.ffn, "dropout": float(args.dropout), "score_scale": 1.0,
            "max_len": args.max_len, "norm_first": 0, "pad_id": PAD, "activation": "relu", "qk_norm": 0}


def check_supported(cfg, path):
    """What this script's model builds: the translator's defaults for what has no option."""
    fixed = {"norm_first": 0, "activation": "relu", "score_scale": 1.0, "qk_norm": 0, "pad_id": PAD}
    for key, value in fixed.items():
        if cfg.get(key, value) != value:
            raise SystemExit(f"train.py: '{path}': {key} is {cfg[key]!r}; this script builds {key} {value!r} only")


def adam_options(lr):
    return dict(lr=lr, betas=(0.9, 0.98), eps=1e-9)


def new_schedule(args, d_model):
    import ember
    if args.schedule == "cosine":
        min_lr = args.min_lr if args.min_lr >= 0 else args.lr / 20
        return ember.optim.WarmupCosineSchedule(args.lr, args.warmup, args.decay_steps, min_lr)
    return ember.optim.InverseSqrtSchedule(d_model, args.warmup, args.lr * math.sqrt(float(d_model * args.warmup)))


def schedule_of(state):
    """The schedule a checkpoint holds, at its step."""
    import ember
    s = state["settings"]
    if state["kind"] == "WarmupCosine":
        sched = ember.optim.WarmupCosineSchedule(s["peak_lr"], int(s["warmup"]), int(s["total"]), s["min_lr"])
    elif state["kind"] == "InverseSqrt":
        sched = ember.optim.InverseSqrtSchedule(int(s["d_model"]), int(s["warmup"]), s["factor"])
    else:
        raise SystemExit(f"train.py: the checkpoint's schedule is {state['kind']}; "
                         "expected WarmupCosine or InverseSqrt")
    sched.last_step = state["last_step"]
    return sched


# ------------------------------------------------------------------ training (train.cpp)

class Run:
    """A training run's state: the model, optimizer, schedule, generators and place in the
    data, as `translate train` holds them and its checkpoints store them."""

    def __init__(self, args):
        import ember
        self.args = args
        self.train_pairs = read_pairs(args.train)
        resume = None
        if args.resume:
            resume = ember.serialization.read_checkpoint(args.resume)
            cfg = dict(resume["config"])
            check_supported(cfg, args.resume)
            self.src_vocab = CharVocab(resume["vocab"]["source"])
            self.tgt_vocab = CharVocab(resume["vocab"]["target"])
        else:
            if args.d_model % args.heads:
                raise SystemExit(f"train.py: --heads {args.heads} must divide --d-model {args.d_model}")
            self.src_vocab = CharVocab.build([s for s, _ in self.train_pairs])
            self.tgt_vocab = CharVocab.build([t for _, t in self.train_pairs])
            cfg = model_config(args, len(self.src_vocab), len(self.tgt_vocab))
        self.cfg = cfg
        self.train_set = [(self.src_vocab.encode(s), self.tgt_vocab.encode(t)) for s, t in self.train_pairs]
        for n, (s, t) in enumerate(self.train_set, 1):
            if max(len(s), len(t)) + 1 > cfg["max_len"]:
                raise SystemExit(f"train.py: {args.train}:{n}: longer than --max-len {cfg['max_len']} allows")

        # three streams, seeded as train.cpp seeds them: initialisation, dropout, data order
        self.init_gen = ember.Generator(args.seed * 1000003 + 17)
        self.dropout_gen = ember.Generator(args.seed)
        self.data_gen = ember.Generator(args.seed * 7919 + 3)
        DateTranslator, xavier_init = _modules()
        self.model = DateTranslator(cfg, self.init_gen, self.dropout_gen)
        xavier_init(self.model, self.init_gen)
        self.sched = schedule_of(resume["schedule"]) if resume else new_schedule(args, cfg["d_model"])
        self.opt = ember.optim.Adam(self.model.named_parameters(), **adam_options(self.sched.lr_at(1)))
        self.step, self.epoch, self.position = 0, 0, 0
        self.order = []
        self.loss_history, self.valid_history = [], []
        if resume:
            self.model.load_state_dict(resume["model"])
            saved = resume["optimizer"]
            self.opt.load_state_dict({
                "kind": saved.kind, "param_groups": [dict(saved.hyper)],
                "state": {name: dict(state.slots, step=state.step) for name, state in saved.params.items()}})
            # older checkpoints drew dropout from the default stream, saved as "default"
            generators = resume["generators"]
            self.dropout_gen.set_state(generators["dropout"] if "dropout" in generators else generators["default"])
            self.data_gen.set_state(resume["generators"]["data"])
            p = resume["progress"]
            self.step, self.epoch, self.position = p["step"], p["epoch"], p["position"]
            self.order = resume["extra"]["order"].tolist()
            self.loss_history = [tuple(r) for r in resume["extra"]["loss_history"].tolist()]
            self.valid_history = [tuple(r) for r in resume["extra"]["valid_history"].tolist()]
        if not self.order:
            self.new_epoch_order()

    def new_epoch_order(self):
        """A Fisher-Yates shuffle with the data generator's draws, as train.cpp's."""
        from ember.nn import init
        order = list(range(len(self.train_set)))
        for i in range(len(order) - 1, 0, -1):
            j = init.next_u64(self.data_gen) % (i + 1)
            order[i], order[j] = order[j], order[i]
        self.order = order

    def next_batch(self):
        if self.position >= len(self.order):
            self.epoch += 1
            self.position = 0
            self.new_epoch_order()
        batch = []
        while len(batch) < self.args.batch and self.position < len(self.order):
            batch.append(self.train_set[self.order[self.position]])
            self.position += 1
        return batch

    def train_step(self):
        """One optimizer step; returns (loss, learning rate, target tokens)."""
        import ember
        from ember.nn import functional as F
        batch = self.next_batch()
        lr = self.sched.step(self.opt)
        self.opt.zero_grad()
        src, tgt_in, tgt_out = make_batch(batch)
        logits = self.model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, self.cfg["tgt_vocab"]), tgt_out.reshape(-1), ignore_index=PAD)
        value = loss.item()
        if not math.isfinite(value):
            raise SystemExit(f"train.py: the loss is {value} at step {self.step + 1}; stopping without saving")
        loss.backward()
        self.opt.step()
        self.step += 1
        return value, lr, sum(len(t) + 1 for _, t in batch)

    def save(self, path):
        """The checkpoint `translate train` writes at this point of the run."""
        import ember
        def pairs(rows):
            return ember.tensor([list(r) for r in rows] if rows else [], dtype=ember.float64).reshape(len(rows), 2)
        ember.serialization.save_checkpoint(
            path, self.model.state_dict(), optimizer=self.opt, schedule=self.sched,
            generators={"dropout": self.dropout_gen, "data": self.data_gen},
            progress={"step": self.step, "epoch": self.epoch, "position": self.position},
            config=self.cfg, vocab={"source": self.src_vocab.tokens, "target": self.tgt_vocab.tokens},
            extra={"order": ember.tensor(self.order, dtype=ember.int64),
                   "world_size": ember.tensor([1], dtype=ember.int64),
                   "loss_history": pairs(self.loss_history), "valid_history": pairs(self.valid_history)})
        return path


def check_new_schedule(args):
    """resume.cpp's check_new_schedule: a cosine decays after its warmup, to at most --lr."""
    if args.schedule == "cosine":
        if args.decay_steps <= args.warmup:
            raise SystemExit(f"train.py: --decay-steps ({args.decay_steps}) must be larger than "
                             f"--warmup ({args.warmup})")
        if args.min_lr > args.lr:
            raise SystemExit(f"train.py: --min-lr ({args.min_lr}) must not exceed --lr ({args.lr})")


def checkpoints_in(directory):
    """The checkpoints CheckpointManager names in a directory, oldest first."""
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.startswith("ckpt-") and n.endswith(".h5") and n[5:-3].isdigit())


def train(args):
    if not args.resume:
        check_new_schedule(args)
        if checkpoints_in(args.out):
            raise SystemExit(f"train.py: '{args.out}' already holds checkpoints ({checkpoints_in(args.out)[-1]}); "
                             "continue with --resume, or choose another --out")
    run = Run(args)
    run.model.train()
    os.makedirs(args.out, exist_ok=True)
    n_params = sum(p.numel() for p in run.model.parameters())
    print(f"training a {n_params}-parameter Transformer (d_model {run.cfg['d_model']}, {run.cfg['nhead']} heads, "
          f"{run.cfg['num_encoder_layers']}+{run.cfg['num_decoder_layers']} layers, ffn {run.cfg['dim_feedforward']}) "
          f"on {len(run.train_set)} pairs from Python", flush=True)
    window, window_steps, seconds, last = 0.0, 0, 0.0, None
    while run.step < args.steps:
        t0 = time.perf_counter()
        loss, lr, _ = run.train_step()
        seconds += time.perf_counter() - t0
        window += loss
        window_steps += 1
        if run.step % args.log_every == 0 or run.step == args.steps:
            mean = window / window_steps
            print(f"step {run.step}/{args.steps}  loss {mean:.4f}  epoch {run.epoch}  lr {lr:.2e}", flush=True)
            if run.step % args.log_every == 0:
                run.loss_history.append((float(run.step), mean))
                window, window_steps = 0.0, 0
        if run.step % args.save_every == 0 or run.step == args.steps:
            last = run.save(os.path.join(args.out, f"ckpt-{run.step:08d}.h5"))
            for old in checkpoints_in(args.out)[:-args.keep]:  # the newest --keep stay
                os.remove(old)
    print(f"done: {run.step} steps, {seconds:.1f} s of training")
    if last:
        print(f"checkpoint: {last}")
    return run


# ------------------------------------------------------------------ decoding

def load(path):
    """The model of a checkpoint (ours or `translate train`'s) in eval mode, with its
    vocabularies."""
    import ember
    c = ember.serialization.read_checkpoint(path)
    check_supported(c["config"], path)
    DateTranslator, _ = _modules()
    model = DateTranslator(c["config"])
    model.load_state_dict(c["model"])
    model.eval()
    return model, CharVocab(c["vocab"]["source"]), CharVocab(c["vocab"]["target"]), c


def greedy_decode(model, src_vocab, tgt_vocab, texts, max_len=None):
    """Each text translated greedily: the whole prefix through the decoder at every step
    (no cache), stopping at </s>."""
    import ember
    limit = max_len or model.cfg["max_len"] - 1
    with ember.no_grad():
        src = ember.tensor(pad_rows([src_vocab.encode(t) for t in texts], end=END), dtype=ember.int64)
        out = [[BEGIN] for _ in texts]
        done = [False] * len(texts)
        for _ in range(limit):
            logits = model(src, ember.tensor(out, dtype=ember.int64))
            best = logits.select(1, len(out[0]) - 1).argmax(-1).tolist()
            for i, b in enumerate(best):
                out[i].append(PAD if done[i] else b)
                done[i] = done[i] or b == END
            if all(done):
                break
    return [tgt_vocab.decode(o[1:]) for o in out]


def decode(args):
    model, src_vocab, tgt_vocab, _ = load(args.checkpoint)
    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    for line in greedy_decode(model, src_vocab, tgt_vocab, texts):
        print(line)


# ------------------------------------------------------------------ the command line (options.cpp)

def parser():
    p = argparse.ArgumentParser(description="The date translator in Python over ember's layers; the same bits as "
                                            "`translate train`.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model (or continue one with --resume), as `translate train`")
    t.add_argument("--train", default="data/dates/train.tsv", help="training pairs, source<TAB>target a line")
    t.add_argument("--out", default="runs/py-dates", help="directory for checkpoints")
    t.add_argument("--resume", default="", help="continue from this checkpoint (ours or translate train's)")
    t.add_argument("--steps", type=int, default=3000, help="train until this step")
    t.add_argument("--batch", type=int, default=64, help="pairs per batch")
    t.add_argument("--d-model", type=int, default=128, help="model width")
    t.add_argument("--heads", type=int, default=4, help="attention heads (must divide --d-model)")
    t.add_argument("--enc-layers", type=int, default=2, help="encoder layers")
    t.add_argument("--dec-layers", type=int, default=2, help="decoder layers")
    t.add_argument("--ffn", type=int, default=512, help="feed-forward width")
    t.add_argument("--dropout", type=float, default=0.1, help="dropout probability")
    t.add_argument("--max-len", type=int, default=64, help="longest sequence, </s> included")
    t.add_argument("--lr", type=float, default=3e-3, help="Adam's peak learning rate")
    t.add_argument("--warmup", type=int, default=150, help="warmup steps")
    t.add_argument("--schedule", choices=["cosine", "inverse-sqrt"], default="cosine")
    t.add_argument("--decay-steps", type=int, default=700,
                   help="with cosine: the step at which the rate reaches --min-lr")
    t.add_argument("--min-lr", type=float, default=-1, help="with cosine: the final rate (default --lr / 20)")
    t.add_argument("--seed", type=int, default=1, help="initialisation, dropout and data order")
    t.add_argument("--threads", type=int, default=0, help="threads (default: OMP_NUM_THREADS, else every core)")
    t.add_argument("--log-every", type=int, default=50, help="a progress line every N steps")
    t.add_argument("--save-every", type=int, default=500, help="a checkpoint every N steps, and at the end")
    t.add_argument("--keep", type=int, default=3, help="keep the newest N checkpoints")
    d = sub.add_parser("decode", help="translate each TEXT (without TEXT: each line of stdin)")
    d.add_argument("--checkpoint", required=True)
    d.add_argument("--threads", type=int, default=0)
    d.add_argument("text", nargs="*")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    if args.threads > 0:  # read by ember's thread pool when it starts: before ember is imported
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.command == "train":
        train(args)
    else:
        decode(args)


if __name__ == "__main__":
    main()
