// Batching, decoding, accuracy and configuration for the sequence-to-sequence examples.
#include "lib/seq2seq/seq2seq.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "nn/init.h"

namespace ember::seq2seq {

using namespace ember;
using text::CharVocab;

namespace {

// Rows of ids, each followed by `end` when given, padded with 0 to the longest.
Tensor pad_rows(const std::vector<const std::vector<int64_t>*>& rows, int64_t begin, int64_t end) {
  int64_t longest = 0;
  for (auto* r : rows) longest = std::max<int64_t>(longest, (int64_t)r->size() + (begin >= 0) + (end >= 0));
  std::vector<int64_t> ids(rows.size() * longest, CharVocab::kPad);
  for (size_t i = 0; i < rows.size(); i++) {
    int64_t* row = ids.data() + i * longest;
    int64_t k = 0;
    if (begin >= 0) row[k++] = begin;
    for (int64_t id : *rows[i]) row[k++] = id;
    if (end >= 0) row[k++] = end;
  }
  return from_vector(ids, {(int64_t)rows.size(), longest});
}

}  // namespace

Batch make_batch(const std::vector<const Example*>& examples) {
  if (examples.empty()) fail("make_batch", "got no examples");
  std::vector<const std::vector<int64_t>*> src, tgt;
  Batch b;
  for (auto* e : examples) {
    src.push_back(&e->source);
    tgt.push_back(&e->target);
    b.target_tokens += (int64_t)e->target.size() + 1;
  }
  b.src = pad_rows(src, -1, CharVocab::kEnd);
  b.tgt_in = pad_rows(tgt, CharVocab::kBegin, -1);
  b.tgt_out = pad_rows(tgt, -1, CharVocab::kEnd);
  return b;
}

Tensor pad_sources(const std::vector<std::vector<int64_t>>& sources) {
  std::vector<const std::vector<int64_t>*> rows;
  for (auto& s : sources) rows.push_back(&s);
  return pad_rows(rows, -1, CharVocab::kEnd);
}

std::vector<Example> encode_pairs(const std::vector<text::Pair>& pairs, const std::string& file,
                                  const CharVocab& src_vocab, const CharVocab& tgt_vocab, bool unknown_targets) {
  std::vector<Example> out;
  out.reserve(pairs.size());
  for (auto& p : pairs) {
    try {
      out.push_back({src_vocab.encode(p.source), tgt_vocab.encode(p.target, unknown_targets)});
    } catch (const Error& e) {
      fail("encode_pairs", file, ":", p.line, ": ", e.what());
    }
  }
  return out;
}

void xavier_init(nn::Transformer& model, Generator* gen) {
  for (auto& [name, p] : model.named_parameters()) {
    const bool in_stack = name.rfind("encoder.", 0) == 0 || name.rfind("decoder.", 0) == 0;
    if (in_stack && p.dim() > 1) nn::init::xavier_uniform_(p, 1.0, gen);
  }
}

std::vector<std::vector<int64_t>> greedy_decode(nn::Transformer& model, const std::vector<std::vector<int64_t>>& sources,
                                                int64_t max_len, int64_t batch_size) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  std::vector<std::vector<int64_t>> out(sources.size());
  for (size_t first = 0; first < sources.size(); first += (size_t)batch_size) {
    const size_t last = std::min(sources.size(), first + (size_t)batch_size);
    std::vector<std::vector<int64_t>> chunk(sources.begin() + first, sources.begin() + last);
    const int64_t B = (int64_t)chunk.size();
    nn::DecoderState state = model.start_decoding(pad_sources(chunk));
    std::vector<int64_t> next(B, CharVocab::kBegin);
    std::vector<bool> done(B, false);
    for (int64_t t = 0; t < max_len; t++) {
      Tensor logits = model.decode_step(state, from_vector(next, {B}));  // [B, V]
      Tensor best = argmax(logits, -1);
      std::vector<int64_t> ids = best.to_vector<int64_t>();
      bool all_done = true;
      for (int64_t i = 0; i < B; i++) {
        if (done[i]) {
          next[i] = CharVocab::kPad;
          continue;
        }
        if (ids[i] == CharVocab::kEnd) {
          done[i] = true;
        } else {
          out[first + i].push_back(ids[i]);
          all_done = false;
        }
        next[i] = ids[i];
      }
      if (all_done) break;
    }
  }
  model.train(was_training);
  return out;
}

Accuracy accuracy(const std::vector<std::vector<int64_t>>& outputs, const std::vector<std::vector<int64_t>>& targets) {
  if (outputs.size() != targets.size())
    fail("accuracy", "got ", outputs.size(), " outputs for ", targets.size(), " targets");
  Accuracy a;
  a.count = (int64_t)outputs.size();
  if (a.count == 0) return a;
  int64_t exact = 0, matching = 0, positions = 0;
  for (size_t i = 0; i < outputs.size(); i++) {
    exact += outputs[i] == targets[i];
    const size_t n = std::min(outputs[i].size(), targets[i].size());
    for (size_t k = 0; k < n; k++) matching += outputs[i][k] == targets[i][k];
    positions += (int64_t)std::max(outputs[i].size(), targets[i].size());
  }
  a.exact_count = exact, a.matching = matching, a.positions = positions;
  a.exact = double(exact) / double(a.count);
  a.per_char = positions ? double(matching) / double(positions) : 1.0;
  return a;
}

std::vector<double> counts(const Accuracy& a) {
  return {double(a.count), double(a.exact_count), double(a.matching), double(a.positions)};
}

Accuracy combine(const std::vector<double>& c) {
  if (c.size() != 4) fail("combine", "expected 4 counts {count, exact, matching, positions}, got ", c.size());
  Accuracy a;
  a.count = std::llround(c[0]), a.exact_count = std::llround(c[1]), a.matching = std::llround(c[2]),
  a.positions = std::llround(c[3]);
  if (a.count == 0) return a;
  a.exact = double(a.exact_count) / double(a.count);
  a.per_char = a.positions ? double(a.matching) / double(a.positions) : 1.0;
  return a;
}

io::Config to_config(const nn::TransformerConfig& c) {
  return {{"src_vocab", c.src_vocab},
          {"tgt_vocab", c.tgt_vocab},
          {"d_model", c.d_model},
          {"nhead", c.nhead},
          {"num_encoder_layers", c.num_encoder_layers},
          {"num_decoder_layers", c.num_decoder_layers},
          {"dim_feedforward", c.dim_feedforward},
          {"dropout", c.dropout},
          {"activation", std::string(c.activation == nn::Activation::GELU ? "gelu" : "relu")},
          {"norm_first", int64_t(c.norm_first)},
          {"max_len", c.max_len},
          {"pad_id", c.pad_id},
          {"score_scale", c.score_scale}};
}

nn::TransformerConfig from_config(const io::Config& config, const std::string& file) {
  const char* op = "from_config";
  auto integer = [&](const char* k, int64_t lo, int64_t hi) {
    auto it = config.find(k);
    if (it == config.end()) fail(op, "'", file, "': key '/config' lacks '", k, "'");
    auto* v = std::get_if<int64_t>(&it->second);
    if (!v) fail(op, "'", file, "': key '/config' attribute '", k, "' must be an integer, got ", io::to_string(it->second));
    if (*v < lo || *v > hi)
      fail(op, "'", file, "': key '/config' attribute '", k, "' must be in [", lo, ", ", hi, "], got ", *v);
    return *v;
  };
  nn::TransformerConfig c;
  c.src_vocab = integer("src_vocab", 5, kMaxVocab);
  c.tgt_vocab = integer("tgt_vocab", 5, kMaxVocab);
  c.d_model = integer("d_model", 1, kMaxWidth);
  c.nhead = integer("nhead", 1, c.d_model);
  if (c.d_model % c.nhead != 0)
    fail(op, "'", file, "': key '/config': nhead ", c.nhead, " does not divide d_model ", c.d_model);
  c.num_encoder_layers = integer("num_encoder_layers", 1, kMaxLayers);
  c.num_decoder_layers = integer("num_decoder_layers", 1, kMaxLayers);
  c.dim_feedforward = integer("dim_feedforward", 1, kMaxWidth * 16);
  c.norm_first = integer("norm_first", 0, 1) != 0;
  c.max_len = integer("max_len", 2, kMaxLength);
  c.pad_id = integer("pad_id", 0, c.src_vocab - 1);
  auto it = config.find("dropout");
  if (it == config.end() || !std::holds_alternative<double>(it->second))
    fail(op, "'", file, "': key '/config' needs a real 'dropout'");
  c.dropout = std::get<double>(it->second);
  if (!(c.dropout >= 0 && c.dropout < 1))
    fail(op, "'", file, "': key '/config' attribute 'dropout' must be in [0, 1), got ", c.dropout);
  it = config.find("activation");
  const std::string* act = it == config.end() ? nullptr : std::get_if<std::string>(&it->second);
  if (!act || (*act != "relu" && *act != "gelu"))
    fail(op, "'", file, "': key '/config' needs 'activation' \"relu\" or \"gelu\"");
  c.activation = *act == "gelu" ? nn::Activation::GELU : nn::Activation::ReLU;
  // written since scores could be scaled; absent (older checkpoints): 1
  it = config.find("score_scale");
  if (it != config.end()) {
    const double* s = std::get_if<double>(&it->second);
    if (!s || !(*s >= kMinScoreScale && *s <= kMaxScoreScale))
      fail(op, "'", file, "': key '/config' attribute 'score_scale' must be a real in [", kMinScoreScale, ", ",
           kMaxScoreScale, "], got ", io::to_string(it->second));
    c.score_scale = *s;
  }
  if (config.size() != to_config(c).size() - (it == config.end()))
    for (auto& [k, v] : config)
      if (!to_config(c).count(k)) fail(op, "'", file, "': key '/config' has an unknown attribute '", k, "'");
  return c;
}

void check_order(const std::vector<int64_t>& order, int64_t position, size_t pairs, const std::string& path,
                 const std::string& train) {
  if (order.size() != pairs)
    fail("check_order", "'", path, "' was trained on ", order.size(), " pairs; --train ", train, " has ", pairs,
         ": a run resumes on the training set it began with");
  std::vector<bool> seen(pairs, false);
  for (int64_t i : order) {
    if (i < 0 || i >= (int64_t)pairs || seen[(size_t)i])
      fail("check_order", "'", path, "': key '/extra/order' is not a permutation of the ", pairs,
           " pair indices (", i, " is out of range or repeated)");
    seen[(size_t)i] = true;
  }
  if (position > (int64_t)pairs)
    fail("check_order", "'", path, "': key '/progress/position' is ", position, ", past the ", pairs,
         " pairs of an epoch");
}

double parameter_count(const nn::TransformerConfig& c) {
  const double d = double(c.d_model), f = double(c.dim_feedforward);
  const double attention = 4 * d * d + 4 * d, feed_forward = 2 * d * f + f + d, norm = 2 * d;
  const double final_norm = c.norm_first ? norm : 0;  // pre-norm stacks end with a LayerNorm, post-norm ones do not
  const double encoder = double(c.num_encoder_layers) * (attention + feed_forward + 2 * norm) + final_norm;
  const double decoder = double(c.num_decoder_layers) * (2 * attention + feed_forward + 3 * norm) + final_norm;
  return double(c.src_vocab + c.tgt_vocab) * d + encoder + decoder + d * double(c.tgt_vocab) + double(c.tgt_vocab);
}

double training_bytes(const nn::TransformerConfig& c, int64_t batch) {
  const double tokens = double(batch) * double(c.max_len), layers = double(c.num_encoder_layers + c.num_decoder_layers);
  const double state = 4 * parameter_count(c) * 4;  // parameters, gradients, two Adam moments
  const double positions = 2 * double(c.max_len) * double(c.d_model) * 4;
  // per layer: a few dozen [tokens, d_model] activations, the feed-forward's hidden rows,
  // and the attention weights of every head
  const double activations = layers * tokens *
                             (32 * double(c.d_model) + 4 * double(c.dim_feedforward) + 3 * double(c.nhead) * double(c.max_len)) * 4;
  return state + positions + activations + tokens * double(c.tgt_vocab) * 4 * 3;
}

}  // namespace ember::seq2seq
