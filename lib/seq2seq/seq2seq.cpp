// Batching, decoding and accuracy for the sequence-to-sequence examples.
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

Tensor z_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  const char* op = "seq2seq::z_loss";
  if (!logits.defined() || !targets.defined() || logits.dim() != 2 || targets.dim() != 1 ||
      targets.size(0) != logits.size(0) || targets.dtype() != kInt64)
    fail(op, "expected logits [N, V] and int64 targets [N], got logits ",
         logits.defined() ? cat_str(logits.shape()) : "none", " and targets ",
         targets.defined() ? cat_str(targets.shape(), " ", dtype_name(targets.dtype())) : "none");
  const Tensor kept = ne(targets, double(ignore_index)).to(logits.dtype());  // [N] 1 at predicted positions
  const double count = sum(kept).item();
  if (count == 0) return zeros({}, logits.dtype());
  const Tensor lse = logsumexp(logits, {1});  // [N] log Z
  return mul(sum(mul(square(lse), kept)), 1.0 / count);
}

void xavier_init(nn::Transformer& model, Generator* gen) {
  for (auto& [name, p] : model.named_parameters()) {
    const bool in_stack = name.rfind("encoder.", 0) == 0 || name.rfind("decoder.", 0) == 0;
    if (in_stack && p.dim() > 1) nn::init::xavier_uniform_(p, 1.0, gen);
  }
}

std::vector<std::vector<int64_t>> greedy_decode(nn::Transformer& model, const std::vector<std::vector<int64_t>>& sources,
                                                int64_t max_len, int64_t batch_size,
                                                const std::function<bool()>& stop) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  std::vector<std::vector<int64_t>> out(sources.size());
  for (size_t first = 0; first < sources.size(); first += (size_t)batch_size) {
    if (stop && stop()) {
      out.resize(first);
      break;
    }
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

}  // namespace ember::seq2seq
