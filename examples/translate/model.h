// A trained translator as a checkpoint holds it, and the data it reads: the model and
// its vocabularies loaded from a checkpoint, the ids of an input line, the check that
// pairs fit the model's length, and the probe batch its attention is watched on.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "lib/seq2seq/seq2seq.h"
#include "lib/text/text.h"
#include "lib/watch/watch.h"
#include "nn/transformer.h"

namespace ember::translate {

// A checkpoint's model in eval mode, with its vocabularies and the checkpoint itself.
struct Loaded {
  std::shared_ptr<nn::Transformer> model;
  text::CharVocab src_vocab, tgt_vocab;
  io::Checkpoint checkpoint;
};

// A checkpoint's vocabulary ("source" or "target"); errors name the file and the key.
text::CharVocab vocab_of(const io::Checkpoint& c, const std::string& name, const std::string& file);
// The model pads with the configuration's pad_id and the vocabularies with "<pad>": they
// must be one index, or a character is taken for padding. Errors name the file and keys.
void check_pad_id(const nn::TransformerConfig& cfg, const text::CharVocab& src_vocab,
                  const text::CharVocab& tgt_vocab, const std::string& file);
// The model of a checkpoint, its configuration and size checked before it is built.
Loaded load_model(const std::string& path);

// The ids of one input line for the model, or an error saying what is wrong with it.
std::vector<int64_t> source_ids(const Loaded& l, const std::string& line);

// A pair longer than the model reads: the file, the line and the side.
// who names the command in messages, and limit where max_len comes from.
void check_lengths(const std::vector<text::Pair>& pairs, const std::vector<seq2seq::Example>& set, const std::string& file,
                   int64_t max_len, const char* who = "translate train", const char* limit = "--max-len");

// The probe batch of --watch and of the watch command: the first `rows` examples of a
// set, teacher-forced, with the training loss (the mean cross-entropy over target tokens).
watch::Probe probe_of(nn::Transformer& model, const std::vector<seq2seq::Example>& set, int64_t rows);

}  // namespace ember::translate
