// python_reference: a few seeded computations in C++, their results saved to one HDF5
// file, which python/tests/test_translate.py recomputes from Python and compares to the
// bit. Every input comes from a seeded Generator and every layer is built from one, so
// that the Python side, building the same objects from the same seeds, starts from the
// same bits; train mode, with dropout, so that the masks' draws are compared too.
//
//   python_reference OUT.h5
//
// Saved, for each case, the output and every gradient: "<case>.output", "<case>.grad.<input>"
// and "<case>.grad.<parameter name>".
//   mha          MultiHeadAttention(16, 4 heads, dropout 0.1) on query [2, 5, 16] and key/value
//                [2, 7, 16], the last 2 keys of row 1 padding; forward + backward
//   encoder      EncoderLayer(16, 4 heads, ffn 32, dropout 0.1) on [3, 6, 16], padded rows
//   decoder      DecoderLayer (the same) on a causal target [3, 4, 16] over memory [3, 6, 16]
//   transformer  the date translator's nn::Transformer (d_model 16, 2 heads, 1+1 layers, ffn 32,
//                dropout 0.1, seq2seq::xavier_init) on a padded source and an unpadded target:
//                logits, the cross-entropy and every parameter's gradient
#include <cstdio>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "io/tensor_file.h"
#include "lib/seq2seq/seq2seq.h"
#include "nn/functional.h"
#include "nn/transformer.h"

using namespace ember;

namespace {

// inputs of the cases: N(0, 1) from this generator, in the order the cases take them
Tensor normal_input(const Shape& shape, Generator& gen) {
  Tensor t = randn(shape, kFloat32, &gen);
  t.requires_grad_(true);
  return t;
}

// [B, S] bool, true at the last `padded[b]` positions of row b
Tensor padding(int64_t S, const std::vector<int64_t>& padded) {
  std::vector<bool> v;
  for (int64_t p : padded)
    for (int64_t s = 0; s < S; s++) v.push_back(s >= S - p);
  return from_bools(v, {(int64_t)padded.size(), S});
}

void add_grads(io::NamedTensors& out, const std::string& name, const nn::Module& m) {
  for (const auto& [p, t] : m.named_parameters()) out.push_back({name + ".grad." + p, t.grad()});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: python_reference OUT.h5\n");
    return 2;
  }
  try {
    io::NamedTensors out;
    {
      Generator init(21), drop(22), data(23);
      nn::MultiHeadAttention mha(
          {.embed_dim = 16, .num_heads = 4, .dropout_p = 0.1, .gen = &init, .dropout_gen = &drop});
      mha.train();
      Tensor q = normal_input({2, 5, 16}, data), k = normal_input({2, 7, 16}, data), v = normal_input({2, 7, 16}, data);
      Tensor up = randn({2, 5, 16}, kFloat32, &data);
      Tensor y = mha.forward(q, k, v, {.key_padding_mask = nn::AttentionMask::blocked(padding(7, {0, 2}))}).output;
      y.backward(up);
      out.insert(out.end(), {{"mha.output", y}, {"mha.grad.query", q.grad()}, {"mha.grad.key", k.grad()},
                             {"mha.grad.value", v.grad()}});
      add_grads(out, "mha", mha);
    }
    const nn::LayerConfig layer{.d_model = 16, .num_heads = 4, .dim_feedforward = 32, .dropout_p = 0.1};
    {
      Generator init(31), drop(32), data(33);
      nn::LayerConfig c = layer;
      c.dropout_gen = &drop;
      nn::EncoderLayer enc(c, &init);
      enc.train();
      Tensor x = normal_input({3, 6, 16}, data);
      Tensor up = randn({3, 6, 16}, kFloat32, &data);
      Tensor y = enc.forward(x, nn::AttentionMask::blocked(padding(6, {0, 1, 3})));
      y.backward(up);
      out.insert(out.end(), {{"encoder.output", y}, {"encoder.grad.src", x.grad()}});
      add_grads(out, "encoder", enc);
    }
    {
      Generator init(41), drop(42), data(43);
      nn::LayerConfig c = layer;
      c.dropout_gen = &drop;
      nn::DecoderLayer dec(c, &init);
      dec.train();
      Tensor x = normal_input({3, 4, 16}, data), memory = normal_input({3, 6, 16}, data);
      Tensor up = randn({3, 4, 16}, kFloat32, &data);
      Tensor y = dec.forward(x, memory,
                             {.tgt_key_padding_mask = nn::AttentionMask::blocked(padding(4, {0, 1, 0})),
                              .memory_key_padding_mask = nn::AttentionMask::blocked(padding(6, {2, 0, 1}))});
      y.backward(up);
      out.insert(out.end(),
                 {{"decoder.output", y}, {"decoder.grad.tgt", x.grad()}, {"decoder.grad.memory", memory.grad()}});
      add_grads(out, "decoder", dec);
    }
    {
      Generator init(51), drop(52);
      nn::TransformerConfig cfg{.src_vocab = 12, .tgt_vocab = 9, .layer = layer, .num_encoder_layers = 1,
                                .num_decoder_layers = 1, .max_len = 10, .pad_id = 0};
      cfg.layer.num_heads = 2;
      cfg.layer.dropout_gen = &drop;
      nn::Transformer model(cfg, &init);
      seq2seq::xavier_init(model, &init);
      model.train();
      Tensor src = from_vector(std::vector<int64_t>{4, 5, 6, 7, 2, 0, 8, 9, 10, 11, 5, 2, 6, 2, 0, 0, 0, 0}, {3, 6});
      Tensor tgt_in = from_vector(std::vector<int64_t>{1, 4, 5, 6, 1, 7, 8, 4, 1, 5, 5, 5}, {3, 4});
      Tensor tgt_out = from_vector(std::vector<int64_t>{4, 5, 6, 2, 7, 8, 4, 2, 5, 5, 5, 2}, {3, 4});
      Tensor logits = model.forward(src, tgt_in);
      Tensor loss = nn::cross_entropy(logits.reshape({-1, cfg.tgt_vocab}), tgt_out.reshape({-1}), 0);
      loss.backward();
      out.insert(out.end(), {{"transformer.output", logits}, {"transformer.loss", loss}});
      add_grads(out, "transformer", model);
    }
    io::save(argv[1], out);
  } catch (const Error& e) {
    std::fprintf(stderr, "python_reference: %s\n", e.what());
    return 1;
  }
  return 0;
}
