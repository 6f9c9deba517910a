"""The date translator from Python (examples/translate/train.py) against the C++ programs:
the same training to the bit as `translate train`, checkpoints that each side reads from
the other, and seeded computations (MultiheadAttention, the encoder and decoder layers,
the whole model) that give the same bits from Python as from C++ (tools/python_reference).

The C++ programs are found through EMBER_TRANSLATE and EMBER_PYTHON_REFERENCE, which
CTest sets (python/CMakeLists.txt); without them those tests are skipped."""

import importlib.util
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember import nn
from ember.nn import functional as F
from ember.nn import init

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_PY = os.path.join(ROOT, "examples", "translate", "train.py")


def program(variable):
    path = os.environ.get(variable)
    if not path or not os.path.exists(path):
        pytest.skip(f"{variable} does not name a built program")
    return path


def translator():
    spec = importlib.util.spec_from_file_location("translate_train", TRAIN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ------------------------------------------------------------------ initialisation

def test_init_draws_what_the_cpp_layers_draw():
    g, h = ember.Generator(11), ember.Generator(11)
    lin = nn.Linear(33, 20, generator=g)
    w, b = ember.zeros(20, 33), ember.zeros(20)
    init.kaiming_uniform_(w, math.sqrt(5.0), h)
    init.uniform_(b, -1 / math.sqrt(33), 1 / math.sqrt(33), h)
    assert same_bits(w.numpy(), lin.weight.detach().numpy())
    assert same_bits(b.numpy(), lin.bias.detach().numpy())
    emb = nn.Embedding(9, 7, generator=g)  # odd count: Box-Muller's last pair half used
    e = ember.zeros(9, 7)
    init.normal_(e, 0.0, 1.0, h)
    assert same_bits(e.numpy(), emb.weight.detach().numpy())
    assert g.get_state() == h.get_state()


def test_next_u64_is_splitmix64_of_the_counter():
    g = ember.Generator(5)
    first = init.next_u64(g)
    assert g.get_state() == [5, 1]
    assert first == 7134611160154358618  # SplitMix64's first output for seed 5
    assert init.next_u64(g) != first


# ------------------------------------------------------------------ training against translate train

def pair_files(tmp):
    train = os.path.join(tmp, "train.tsv")
    valid = os.path.join(tmp, "valid.tsv")
    with open(os.path.join(ROOT, "data", "dates", "train.tsv"), encoding="utf-8") as f:
        lines = f.readlines()
    with open(train, "w", encoding="utf-8") as f:
        f.writelines(lines[:2000])
    with open(os.path.join(ROOT, "data", "dates", "valid.tsv"), encoding="utf-8") as f:
        lines = f.readlines()
    with open(valid, "w", encoding="utf-8") as f:
        f.writelines(lines[:20])
    return train, valid


STEPS = 100
MODEL = ["--d-model", "64", "--ffn", "256", "--batch", "32"]


# spinning OpenMP threads on a busy machine cost ten times the work: wait passively
ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")


def run_cpp(translate, train, valid, out, threads, *extra):
    subprocess.run([translate, "train", "--train", train, "--valid", valid, "--out", out, "--steps", str(STEPS),
                    "--log-every", "1", "--save-every", "50", "--eval-every", str(STEPS), "--threads", str(threads),
                    *MODEL, *extra], check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=ENV)


def run_python(train, out, threads, *extra):
    subprocess.run([sys.executable, TRAIN_PY, "train", "--train", train, "--out", out, "--steps", str(STEPS),
                    "--log-every", "1", "--save-every", "50", "--threads", str(threads), *MODEL, *extra],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=ENV)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """translate train and train.py, 100 steps each, on one thread and on two."""
    translate = program("EMBER_TRANSLATE")
    tmp = str(tmp_path_factory.mktemp("translate"))
    train, valid = pair_files(tmp)
    cpp, cpp2, py, py2 = (os.path.join(tmp, d) for d in ("cpp", "cpp2", "py", "py2"))
    run_cpp(translate, train, valid, cpp, 1)
    run_cpp(translate, train, valid, cpp2, 2)
    run_python(train, py, 1)
    run_python(train, py2, 2)
    return dict(translate=translate, train=train, valid=valid, cpp=cpp, cpp2=cpp2, py=py, py2=py2, tmp=tmp)


def checkpoint(directory, step):
    return ember.serialization.read_checkpoint(os.path.join(directory, f"ckpt-{step:08d}.h5"))


def assert_same_run(ours, theirs):
    """Every number a run keeps, to the bit: losses, parameters, Adam's moments, the
    schedule, the generators and the place in the data."""
    assert ours["progress"] == theirs["progress"]
    assert ours["config"] == theirs["config"]
    assert ours["vocab"] == theirs["vocab"]
    assert ours["generators"] == theirs["generators"]
    assert ours["schedule"] == theirs["schedule"]
    assert same_bits(ours["extra"]["order"].numpy(), theirs["extra"]["order"].numpy())
    losses, their_losses = ours["extra"]["loss_history"].numpy(), theirs["extra"]["loss_history"].numpy()
    assert losses.shape == (ours["progress"]["step"], 2)
    assert same_bits(losses, their_losses), np.abs(losses - their_losses).max()
    assert sorted(ours["model"]) == sorted(theirs["model"])
    for name, t in theirs["model"].items():
        assert same_bits(ours["model"][name].numpy(), t.numpy()), name
    opt, their_opt = ours["optimizer"], theirs["optimizer"]
    assert opt.kind == their_opt.kind == "Adam" and opt.hyper == their_opt.hyper
    for name, state in their_opt.params.items():
        assert opt.params[name].step == state.step
        for slot, t in state.slots.items():
            assert same_bits(opt.params[name].slots[slot].numpy(), t.numpy()), (name, slot)


def test_train_py_trains_to_the_bits_of_translate_train(runs):
    cpp = checkpoint(runs["cpp"], STEPS)
    py = checkpoint(runs["py"], STEPS)
    assert cpp["extra"]["loss_history"].numpy()[-1, 1] < cpp["extra"]["loss_history"].numpy()[0, 1]  # it learned
    assert_same_run(py, cpp)
    assert_same_run(checkpoint(runs["py"], 50), checkpoint(runs["cpp"], 50))


def test_on_two_threads_too(runs):
    assert_same_run(checkpoint(runs["py2"], STEPS), checkpoint(runs["cpp2"], STEPS))
    assert_same_run(checkpoint(runs["py2"], STEPS), checkpoint(runs["cpp"], STEPS))  # and one thread's bits


def test_translate_decode_and_eval_read_a_python_checkpoint(runs):
    with open(runs["valid"], encoding="utf-8") as f:
        texts = [line.split("\t")[0] for line in f.readlines()[:5]]
    outputs = {}
    for side in ("py", "cpp"):
        ckpt = os.path.join(runs[side], f"ckpt-{STEPS:08d}.h5")
        decoded = subprocess.run([runs["translate"], "decode", "--checkpoint", ckpt, *texts], check=True,
                                 capture_output=True, text=True).stdout
        evaluated = subprocess.run([runs["translate"], "eval", "--checkpoint", ckpt, "--data", runs["valid"]],
                                   check=True, capture_output=True, text=True).stdout
        # the same report but for the file's name and the time it took
        outputs[side] = (decoded, re.sub(r"decoded in [0-9.]+ s", "", evaluated.replace(ckpt, "CHECKPOINT")))
    assert len(outputs["py"][0].splitlines()) == len(texts)
    assert outputs["py"] == outputs["cpp"]


def test_python_resumes_a_checkpoint_of_translate_train(runs):
    out = os.path.join(runs["tmp"], "py-resumed")
    run_python(runs["train"], out, 1, "--resume", os.path.join(runs["cpp"], "ckpt-00000050.h5"))
    assert_same_run(checkpoint(out, STEPS), checkpoint(runs["cpp"], STEPS))


def test_translate_train_resumes_a_python_checkpoint(runs):
    out = os.path.join(runs["tmp"], "cpp-resumed")
    run_cpp(runs["translate"], runs["train"], runs["valid"], out, 1, "--resume",
            os.path.join(runs["py"], "ckpt-00000050.h5"))
    resumed, cpp = checkpoint(out, STEPS), checkpoint(runs["cpp"], STEPS)
    assert_same_run(resumed, cpp)


def test_loaded_translate_checkpoint_gives_the_same_loss(runs):
    """The checkpoint of step 50 in the Python model: the loss of step 51's batch, in train
    mode with the checkpoint's dropout stream, is the loss translate train logged."""
    t = translator()
    args = t.parser().parse_args(["train", "--train", runs["train"], "--resume",
                                  os.path.join(runs["cpp"], "ckpt-00000050.h5"), "--steps", "51", *MODEL])
    run = t.Run(args)
    run.model.train()
    loss, _, _ = run.train_step()
    logged = checkpoint(runs["cpp"], STEPS)["extra"]["loss_history"].numpy()
    assert logged[50, 0] == 51
    assert loss == logged[50, 1]


# ------------------------------------------------------------------ the same computations from Python and C++

@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    exe = program("EMBER_PYTHON_REFERENCE")
    path = str(tmp_path_factory.mktemp("reference") / "reference.h5")
    subprocess.run([exe, path], check=True)
    return ember.load(path)


def padding(S, padded):
    return ember.tensor([[s >= S - p for s in range(S)] for p in padded], dtype=ember.bool)


def assert_case(reference, case, output, inputs, module):
    assert same_bits(output.detach().numpy(), reference[f"{case}.output"].numpy())
    names = [f"{case}.grad.{n}" for n in inputs] + [f"{case}.grad.{n}" for n, _ in module.named_parameters()]
    grads = [t.grad for t in inputs.values()] + [p.grad for _, p in module.named_parameters()]
    assert sorted(k for k in reference if k.startswith(f"{case}.grad.")) == sorted(names)
    for name, g in zip(names, grads):
        assert same_bits(g.numpy(), reference[name].numpy()), name


def test_multihead_attention_from_python_gives_the_bits_of_cpp(reference):
    init_gen, drop, data = ember.Generator(21), ember.Generator(22), ember.Generator(23)
    mha = nn.MultiheadAttention(16, 4, dropout=0.1, generator=init_gen, dropout_generator=drop)
    mha.train()
    q = ember.randn(2, 5, 16, generator=data, requires_grad=True)
    k = ember.randn(2, 7, 16, generator=data, requires_grad=True)
    v = ember.randn(2, 7, 16, generator=data, requires_grad=True)
    up = ember.randn(2, 5, 16, generator=data)
    y, _ = mha(q, k, v, key_padding_mask=padding(7, [0, 2]), need_weights=False)
    y.backward(up)
    assert_case(reference, "mha", y, {"query": q, "key": k, "value": v}, mha)


def test_encoder_layer_from_python_gives_the_bits_of_cpp(reference):
    init_gen, drop, data = ember.Generator(31), ember.Generator(32), ember.Generator(33)
    layer = nn.TransformerEncoderLayer(16, 4, 32, 0.1, generator=init_gen, dropout_generator=drop)
    layer.train()
    x = ember.randn(3, 6, 16, generator=data, requires_grad=True)
    up = ember.randn(3, 6, 16, generator=data)
    y = layer(x, src_key_padding_mask=padding(6, [0, 1, 3]))
    y.backward(up)
    assert_case(reference, "encoder", y, {"src": x}, layer)


def test_decoder_layer_from_python_gives_the_bits_of_cpp(reference):
    init_gen, drop, data = ember.Generator(41), ember.Generator(42), ember.Generator(43)
    layer = nn.TransformerDecoderLayer(16, 4, 32, 0.1, generator=init_gen, dropout_generator=drop)
    layer.train()
    x = ember.randn(3, 4, 16, generator=data, requires_grad=True)
    memory = ember.randn(3, 6, 16, generator=data, requires_grad=True)
    up = ember.randn(3, 4, 16, generator=data)
    y = layer(x, memory, tgt_key_padding_mask=padding(4, [0, 1, 0]),
              memory_key_padding_mask=padding(6, [2, 0, 1]), tgt_is_causal=True)
    y.backward(up)
    assert_case(reference, "decoder", y, {"tgt": x, "memory": memory}, layer)


def test_translator_composed_in_python_gives_the_bits_of_nn_transformer(reference):
    t = translator()
    DateTranslator, xavier_init = t._modules()
    cfg = {"src_vocab": 12, "tgt_vocab": 9, "d_model": 16, "nhead": 2, "num_encoder_layers": 1,
           "num_decoder_layers": 1, "dim_feedforward": 32, "dropout": 0.1, "max_len": 10, "pad_id": 0}
    init_gen, drop = ember.Generator(51), ember.Generator(52)
    model = DateTranslator(cfg, init_gen, drop)
    xavier_init(model, init_gen)
    model.train()
    src = ember.tensor([[4, 5, 6, 7, 2, 0], [8, 9, 10, 11, 5, 2], [6, 2, 0, 0, 0, 0]], dtype=ember.int64)
    tgt_in = ember.tensor([[1, 4, 5, 6], [1, 7, 8, 4], [1, 5, 5, 5]], dtype=ember.int64)
    tgt_out = ember.tensor([[4, 5, 6, 2], [7, 8, 4, 2], [5, 5, 5, 2]], dtype=ember.int64)
    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits.reshape(-1, 9), tgt_out.reshape(-1), ignore_index=0)
    loss.backward()
    assert same_bits(loss.detach().numpy(), reference["transformer.loss"].numpy())
    assert_case(reference, "transformer", logits, {}, model)


def test_padded_encoder_layer_agrees_with_the_packed_one_to_rounding():
    """Why the translator runs its layers on packed rows: the padded forward is another
    kernel, equal to rounding, not to the bit."""
    t = translator()
    DateTranslator, _ = t._modules()
    cfg = {"src_vocab": 12, "tgt_vocab": 9, "d_model": 16, "nhead": 2, "num_encoder_layers": 1,
           "num_decoder_layers": 1, "dim_feedforward": 32, "dropout": 0.0, "max_len": 10, "pad_id": 0}
    model = DateTranslator(cfg, ember.Generator(3))
    model.eval()
    src = ember.tensor([[4, 5, 6, 7, 2, 0], [6, 2, 0, 0, 0, 0]], dtype=ember.int64)
    packed, packing = model.encode(src)
    x = model.src_embed(src) * math.sqrt(16) + model.pe.narrow(0, 0, 6)
    padded = model.encoder.layers[0](x, src_key_padding_mask=packing.padding)
    kept = packing.pack(padded).detach().numpy()
    np.testing.assert_allclose(kept, packed.detach().numpy(), rtol=0, atol=1e-5)


def test_train_py_decodes_a_translate_checkpoint_as_translate_decode_does(runs):
    with open(runs["valid"], encoding="utf-8") as f:
        texts = [line.split("\t")[0] for line in f.readlines()[:5]]
    ckpt = os.path.join(runs["cpp"], f"ckpt-{STEPS:08d}.h5")
    theirs = subprocess.run([runs["translate"], "decode", "--checkpoint", ckpt, *texts], check=True,
                            capture_output=True, text=True).stdout.splitlines()
    t = translator()
    model, src_vocab, tgt_vocab, _ = t.load(ckpt)
    assert t.greedy_decode(model, src_vocab, tgt_vocab, texts) == theirs


# ------------------------------------------------------------------ checkpoints from Python

def test_save_checkpoint_writes_what_read_checkpoint_reads(tmp_path):
    lin = nn.Linear(3, 2, generator=ember.Generator(1))
    opt = ember.optim.Adam(lin.named_parameters(), lr=0.1)
    sched = ember.optim.WarmupCosineSchedule(0.1, 2, 10, 0.01)
    sched.step(opt)
    lin(ember.ones(4, 3)).sum().backward()
    opt.step()
    gen = ember.Generator(7)
    init.next_u64(gen)
    path = tmp_path / "c.h5"
    ember.serialization.save_checkpoint(path, lin.state_dict(), optimizer=opt, schedule=sched,
                                        generators={"data": gen}, progress={"step": 1, "epoch": 0, "position": 4},
                                        config={"d_model": 3, "dropout": 0.5, "activation": "relu"},
                                        vocab={"source": ["<pad>", "a", "é"]},
                                        extra={"order": ember.tensor([2, 0, 1], dtype=ember.int64)})
    c = ember.serialization.read_checkpoint(path)
    assert sorted(c["model"]) == ["bias", "weight"]
    assert same_bits(c["model"]["weight"].numpy(), lin.weight.detach().numpy())
    assert c["optimizer"].kind == "Adam" and c["optimizer"].params["weight"].step == 1
    assert same_bits(c["optimizer"].params["bias"].slots["exp_avg"].numpy(),
                     opt.state_dict()["state"]["bias"]["exp_avg"].numpy())
    assert c["schedule"] == {"kind": "WarmupCosine", "last_step": 1,
                             "settings": {"peak_lr": 0.1, "warmup": 2.0, "total": 10.0, "min_lr": 0.01}}
    assert c["generators"] == {"data": [7, 1]}
    assert c["progress"] == {"step": 1, "epoch": 0, "position": 4}
    assert c["config"] == {"d_model": 3, "dropout": 0.5, "activation": "relu"}
    assert c["vocab"] == {"source": ["<pad>", "a", "é"]}
    assert c["extra"]["order"].tolist() == [2, 0, 1]


def test_read_checkpoint_refuses_a_damaged_file(tmp_path):
    path = tmp_path / "c.h5"
    ember.serialization.save_checkpoint(path, {"w": ember.ones(3)})
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match="c.h5"):
        ember.serialization.read_checkpoint(path)
