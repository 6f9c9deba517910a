// Loading a trained translator, and the checks of what it reads.
#include "examples/translate/model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "lib/cli/cli.h"
#include "lib/seq2seq/model_options.h"
#include "lib/watch/transformer_probe.h"

namespace ember::translate {

using seq2seq::Example;
using text::CharVocab;

CharVocab vocab_of(const io::Checkpoint& c, const std::string& name, const std::string& file) {
  auto it = c.vocab.find(name);
  if (it == c.vocab.end()) fail("load", "'", file, "': key '/vocab/", name, "' is missing");
  try {
    return CharVocab::from_tokens(it->second);
  } catch (const Error& e) {
    fail("load", "'", file, "': key '/vocab/", name, "': ", e.what());
  }
}

void check_pad_id(const nn::TransformerConfig& cfg, const CharVocab& src_vocab, const CharVocab& tgt_vocab,
                  const std::string& file) {
  for (const auto& [name, vocab] : {std::pair{"source", &src_vocab}, std::pair{"target", &tgt_vocab}}) {
    const auto& tokens = vocab->tokens();
    const int64_t pad = std::find(tokens.begin(), tokens.end(), "<pad>") - tokens.begin();
    if (cfg.pad_id == pad) continue;
    const std::string there = cfg.pad_id < (int64_t)tokens.size()
                                  ? cat_str("its token ", cfg.pad_id, " is ", printable(tokens[(size_t)cfg.pad_id]))
                                  : cat_str("it has ", tokens.size(), " tokens");
    fail("load", "'", file, "': key '/config' attribute 'pad_id' is ", cfg.pad_id, ", but '<pad>' is token ", pad,
         " of '/vocab/", name, "' (", there, ")");
  }
}

Loaded load_model(const std::string& path) {
  Loaded l;
  l.checkpoint = io::read_checkpoint(path);
  nn::TransformerConfig cfg = seq2seq::from_config(l.checkpoint.config, path);
  l.src_vocab = vocab_of(l.checkpoint, "source", path);
  l.tgt_vocab = vocab_of(l.checkpoint, "target", path);
  if (l.src_vocab.size() != cfg.src_vocab || l.tgt_vocab.size() != cfg.tgt_vocab)
    fail("load", "'", path, "': the vocabularies have ", l.src_vocab.size(), " and ", l.tgt_vocab.size(),
         " tokens, the configuration says ", cfg.src_vocab, " and ", cfg.tgt_vocab);
  check_pad_id(cfg, l.src_vocab, l.tgt_vocab, path);
  cli::check_fits_in_memory("translate", 4 * seq2seq::parameter_count(cfg),
                            cat_str("'", path, "': a ", std::llround(seq2seq::parameter_count(cfg)), "-parameter model"));
  l.model = std::make_shared<nn::Transformer>(cfg);
  io::ResumeTargets t;
  t.model = l.model->state_dict();
  t.config = l.checkpoint.config;
  io::load_checkpoint(path, t);
  l.model->eval();
  return l;
}

std::vector<int64_t> source_ids(const Loaded& l, const std::string& line) {
  if (line.empty()) throw Error("the input is empty");
  std::vector<int64_t> ids = l.src_vocab.encode(line);
  const int64_t limit = l.model->cfg.max_len - 1;  // room for </s>
  if ((int64_t)ids.size() > limit)
    throw Error(cat_str("the input has ", ids.size(), " characters; this model reads at most ", limit));
  return ids;
}

void check_lengths(const std::vector<text::Pair>& pairs, const std::vector<Example>& set, const std::string& file,
                   int64_t max_len, const char* who, const char* limit) {
  for (size_t i = 0; i < set.size(); i++)
    for (auto [side, n] : {std::pair<const char*, size_t>{"source", set[i].source.size()}, {"target", set[i].target.size()}})
      if ((int64_t)n + 1 > max_len)
        fail(who, file, ":", pairs[i].line, ": the ", side, " has ", n, " characters, but ", limit, " ", max_len,
             " leaves room for ", max_len - 1, " (one position is </s>)");
}

watch::Probe probe_of(nn::Transformer& model, const std::vector<Example>& set, int64_t rows) {
  std::vector<const Example*> first;
  for (size_t i = 0; i < std::min(set.size(), (size_t)rows); i++) first.push_back(&set[i]);
  const seq2seq::Batch b = seq2seq::make_batch(first);
  return watch::transformer_probe(model, b.src, b.tgt_in, b.tgt_out, CharVocab::kPad);
}

}  // namespace ember::translate
