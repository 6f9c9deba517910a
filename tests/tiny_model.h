// The small Transformer configurations tests build (a few thousand parameters: quick to
// train a step, to save and to gradcheck). Fields are the config's own, so a test changes
// what it needs by name: tiny_transformer({.num_heads = 4, .layers = 2}).
#pragma once
#include <cstdint>

#include "nn/transformer.h"

namespace ember::testing {

struct Tiny {
  int64_t src_vocab = 11, tgt_vocab = 13;
  int64_t d_model = 16, num_heads = 2, dim_feedforward = 32;
  int64_t layers = 1;  // encoder and decoder layers each
  int64_t max_len = 16;
  double dropout_p = 0.1;
};

inline nn::TransformerConfig tiny_transformer(const Tiny& t = {}) {
  nn::TransformerConfig c;
  c.src_vocab = t.src_vocab;
  c.tgt_vocab = t.tgt_vocab;
  c.layer.d_model = t.d_model;
  c.layer.num_heads = t.num_heads;
  c.layer.dim_feedforward = t.dim_feedforward;
  c.layer.dropout_p = t.dropout_p;
  c.num_encoder_layers = c.num_decoder_layers = t.layers;
  c.max_len = t.max_len;
  return c;
}

}  // namespace ember::testing
