// The translator's model configuration: its one table, and what walks it.
#include "lib/seq2seq/model_options.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ember::seq2seq {

using nn::TransformerConfig;

const std::vector<ModelField>& model_fields() {
  using K = FieldKind;
  static const std::vector<ModelField> fields = {
      {.key = "src_vocab", .kind = K::Integer, .lo = 5, .hi = double(kMaxVocab),
       .integer = [](TransformerConfig& c) -> int64_t& { return c.src_vocab; }},
      {.key = "tgt_vocab", .kind = K::Integer, .lo = 5, .hi = double(kMaxVocab),
       .integer = [](TransformerConfig& c) -> int64_t& { return c.tgt_vocab; }},
      {.key = "d_model", .kind = K::Integer, .lo = 1, .hi = double(kMaxWidth),
       .flag = "--d-model", .help = "model width", .initial = 128, .what = "d_model",
       .integer = [](TransformerConfig& c) -> int64_t& { return c.layer.d_model; }},
      {.key = "nhead", .kind = K::Integer, .lo = 1, .hi = double(kMaxWidth),
       .flag = "--heads", .help = "attention heads (must divide --d-model)", .initial = 4, .what = "number of heads",
       .integer = [](TransformerConfig& c) -> int64_t& { return c.layer.num_heads; }},
      {.key = "num_encoder_layers", .kind = K::Integer, .lo = 1, .hi = double(kMaxLayers),
       .flag = "--enc-layers", .help = "encoder layers", .initial = 2, .what = "number of encoder layers",
       .integer = [](TransformerConfig& c) -> int64_t& { return c.num_encoder_layers; }},
      {.key = "num_decoder_layers", .kind = K::Integer, .lo = 1, .hi = double(kMaxLayers),
       .flag = "--dec-layers", .help = "decoder layers", .initial = 2, .what = "number of decoder layers",
       .integer = [](TransformerConfig& c) -> int64_t& { return c.num_decoder_layers; }},
      {.key = "dim_feedforward", .kind = K::Integer, .lo = 1, .hi = double(kMaxWidth * 16),
       .flag = "--ffn", .help = "feed-forward width", .initial = 512, .what = "feed-forward width",
       .integer = [](TransformerConfig& c) -> int64_t& { return c.layer.dim_feedforward; }},
      {.key = "dropout", .kind = K::Real, .lo = 0, .hi = 0.99,
       .flag = "--dropout", .help = "dropout probability", .initial = 0.1, .what = "dropout",
       .real = [](TransformerConfig& c) -> double& { return c.layer.dropout_p; }},
      // written since scores could be scaled; older checkpoints lack it (then 1)
      {.key = "score_scale", .kind = K::Real, .lo = kMinScoreScale, .hi = kMaxScoreScale,
       .flag = "--score-scale",
       .help = "multiply every attention's scores by this on top of 1/sqrt(d_k) "
               "(sqrt(d_k) = sqrt(d_model / heads): unscaled)",
       .initial = 1.0, .what = "score scale", .optional = true,
       .real = [](TransformerConfig& c) -> double& { return c.layer.score_scale; }},
      // written since queries and keys could be normalised; older checkpoints lack it (then off)
      {.key = "qk_norm", .kind = K::Boolean, .lo = 0, .hi = 1,
       .flag = "--qk-norm",
       .help = "layer-normalise every attention's queries and keys over each head's features before the scores "
               "(one gain and bias per attention module for the queries and one for the keys, shared by the heads)",
       .initial = 0, .what = "qk-norm setting", .optional = true,
       .boolean = [](TransformerConfig& c) -> bool& { return c.layer.qk_norm; }},
      {.key = "max_len", .kind = K::Integer, .lo = 2, .hi = double(kMaxLength),
       .flag = "--max-len", .help = "longest sequence, </s> included", .initial = 64, .what = "maximum length",
       .integer = [](TransformerConfig& c) -> int64_t& { return c.max_len; }},
      {.key = "norm_first", .kind = K::Boolean, .lo = 0, .hi = 1,
       .boolean = [](TransformerConfig& c) -> bool& { return c.layer.norm_first; }},
      {.key = "pad_id", .kind = K::Integer, .lo = 0, .hi = double(kMaxVocab - 1),
       .integer = [](TransformerConfig& c) -> int64_t& { return c.pad_id; }},
      {.key = "activation", .kind = K::Activation, .lo = 0, .hi = 1,
       .activation = [](TransformerConfig& c) -> nn::Activation& { return c.layer.activation; }},
  };
  return fields;
}

double value_of(const ModelField& f, const TransformerConfig& c) {
  TransformerConfig m = c;  // the accessors reach into a configuration they may change
  switch (f.kind) {
    case FieldKind::Integer: return double(f.integer(m));
    case FieldKind::Real: return f.real(m);
    case FieldKind::Boolean: return f.boolean(m) ? 1 : 0;
    case FieldKind::Activation: return f.activation(m) == nn::Activation::GELU ? 1 : 0;
  }
  return 0;
}

TransformerConfig default_model_config() {
  TransformerConfig c;
  for (const ModelField& f : model_fields()) {
    if (!f.flag) continue;
    if (f.kind == FieldKind::Integer) f.integer(c) = int64_t(f.initial);
    if (f.kind == FieldKind::Real) f.real(c) = f.initial;
    if (f.kind == FieldKind::Boolean) f.boolean(c) = f.initial != 0;
  }
  return c;
}

std::string describe(const TransformerConfig& c) {
  return cat_str("d_model ", c.layer.d_model, ", ", c.layer.num_heads, " heads, ", c.num_encoder_layers, "+",
                 c.num_decoder_layers, " layers, ffn ", c.layer.dim_feedforward);
}

io::Config to_config(const TransformerConfig& c) {
  TransformerConfig m = c;
  io::Config config;
  for (const ModelField& f : model_fields()) {
    switch (f.kind) {
      case FieldKind::Integer: config[f.key] = f.integer(m); break;
      case FieldKind::Real: config[f.key] = f.real(m); break;
      case FieldKind::Boolean: config[f.key] = int64_t(f.boolean(m)); break;
      case FieldKind::Activation:
        config[f.key] = std::string(f.activation(m) == nn::Activation::GELU ? "gelu" : "relu");
        break;
    }
  }
  return config;
}

TransformerConfig from_config(const io::Config& config, const std::string& file) {
  const char* op = "from_config";
  TransformerConfig c;
  for (const ModelField& f : model_fields()) {
    auto it = config.find(f.key);
    if (f.kind == FieldKind::Activation) {
      const std::string* act = it == config.end() ? nullptr : std::get_if<std::string>(&it->second);
      if (!act || (*act != "relu" && *act != "gelu"))
        fail(op, "'", file, "': key '/config' needs '", f.key, "' \"relu\" or \"gelu\"");
      f.activation(c) = *act == "gelu" ? nn::Activation::GELU : nn::Activation::ReLU;
      continue;
    }
    if (it == config.end()) {
      if (!f.optional) fail(op, "'", file, "': key '/config' lacks '", f.key, "'");
      if (f.kind == FieldKind::Real) f.real(c) = f.initial;
      if (f.kind == FieldKind::Integer) f.integer(c) = int64_t(f.initial);
      if (f.kind == FieldKind::Boolean) f.boolean(c) = f.initial != 0;
      continue;
    }
    if (f.kind == FieldKind::Real) {
      const double* r = std::get_if<double>(&it->second);
      if (!r || !(*r >= f.lo && *r <= f.hi))
        fail(op, "'", file, "': key '/config' attribute '", f.key, "' must be a real in [", f.lo, ", ", f.hi,
             "], got ", io::to_string(it->second));
      f.real(c) = *r;
      continue;
    }
    const int64_t* v = std::get_if<int64_t>(&it->second);
    if (!v)
      fail(op, "'", file, "': key '/config' attribute '", f.key, "' must be an integer, got ",
           io::to_string(it->second));
    const int64_t lo = int64_t(f.lo), hi = int64_t(f.hi);
    if (*v < lo || *v > hi)
      fail(op, "'", file, "': key '/config' attribute '", f.key, "' must be in [", lo, ", ", hi, "], got ", *v);
    if (f.kind == FieldKind::Boolean) f.boolean(c) = *v != 0;
    else f.integer(c) = *v;
  }
  // what holds between fields
  if (c.layer.d_model % c.layer.num_heads != 0)
    fail(op, "'", file, "': key '/config': nhead ", c.layer.num_heads, " does not divide d_model ", c.layer.d_model);
  // both embeddings have a row for padding
  const int64_t rows = std::min(c.src_vocab, c.tgt_vocab);
  if (c.pad_id >= rows)
    fail(op, "'", file, "': key '/config' attribute 'pad_id' must be in [0, ", rows - 1, "] (src_vocab ", c.src_vocab,
         ", tgt_vocab ", c.tgt_vocab, "), got ", c.pad_id);
  for (const auto& [key, value] : config) {
    bool known = false;
    for (const ModelField& f : model_fields()) known = known || key == f.key;
    if (!known) fail(op, "'", file, "': key '/config' has an unknown attribute '", key, "'");
  }
  return c;
}

double parameter_count(const TransformerConfig& c) {
  const double d = double(c.layer.d_model), f = double(c.layer.dim_feedforward);
  const double qk_norm = c.layer.qk_norm ? 4 * d / double(c.layer.num_heads) : 0;  // two LayerNorms of d_k
  const double attention = 4 * d * d + 4 * d + qk_norm, feed_forward = 2 * d * f + f + d, norm = 2 * d;
  const double final_norm = c.layer.norm_first ? norm : 0;  // pre-norm stacks end with a LayerNorm, post-norm ones do not
  const double encoder = double(c.num_encoder_layers) * (attention + feed_forward + 2 * norm) + final_norm;
  const double decoder = double(c.num_decoder_layers) * (2 * attention + feed_forward + 3 * norm) + final_norm;
  return double(c.src_vocab + c.tgt_vocab) * d + encoder + decoder + d * double(c.tgt_vocab) + double(c.tgt_vocab);
}

double training_bytes(const TransformerConfig& c, int64_t batch) {
  const double d = double(c.layer.d_model), f = double(c.layer.dim_feedforward), h = double(c.layer.num_heads);
  const double tokens = double(batch) * double(c.max_len), layers = double(c.num_encoder_layers + c.num_decoder_layers);
  const double state = 4 * parameter_count(c) * 4;  // parameters, gradients, two Adam moments
  const double positions = 2 * double(c.max_len) * d * 4;
  // per layer: a few dozen [tokens, d_model] activations, the feed-forward's hidden rows,
  // and the attention weights of every head
  const double activations = layers * tokens * (32 * d + 4 * f + 3 * h * double(c.max_len)) * 4;
  return state + positions + activations + tokens * double(c.tgt_vocab) * 4 * 3;
}

}  // namespace ember::seq2seq
