// The pieces of a character-level sequence-to-sequence program around nn::Transformer:
// examples as token ids, padded batches, greedy decoding with cached keys and values,
// and accuracy (the model's configuration, as a checkpoint stores it and a command line
// gives it, is model_options.h). The date
// translator (examples/translate) is built from them, and so is the copy/reverse test.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/transformer.h"
#include "lib/text/text.h"

namespace ember::seq2seq {

using ember::Tensor;

// One pair as ids, without special tokens.
struct Example {
  std::vector<int64_t> source, target;
};

// A padded batch (pad = 0). src: source + </s> [B, S]; tgt_in: <s> + target [B, T];
// tgt_out: target + </s> [B, T], the tokens the decoder must predict.
struct Batch {
  Tensor src, tgt_in, tgt_out;
  int64_t target_tokens = 0;  // non-pad tokens of tgt_out
};

Batch make_batch(const std::vector<const Example*>& examples);
Tensor pad_sources(const std::vector<std::vector<int64_t>>& sources);  // each + </s>, padded [B, S]

// Encodes pairs with the vocabularies; an unknown character is an error naming the
// pair's file and line.
// With unknown_targets, a target character outside the vocabulary becomes <unk> (which
// the model never produces, so the pair counts as wrong) instead of an error.
std::vector<Example> encode_pairs(const std::vector<text::Pair>& pairs, const std::string& file,
                                  const text::CharVocab& src_vocab, const text::CharVocab& tgt_vocab,
                                  bool unknown_targets = false);

// The z-loss of output logits [N, V] at the positions whose target [N] (int64) is not
// ignore_index: the mean over them of log(Z)^2, Z = sum exp(logits) the softmax's
// normaliser (PaLM; Wortsman et al. 2023), which keeps log Z near 0. A scalar of logits'
// dtype, 0 when every target is ignored. Error for other shapes.
Tensor z_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index);

// PyTorch nn.Transformer's initialisation of the encoder and decoder: Xavier-uniform
// for every matrix (the embeddings keep N(0, 1/d_model)).
void xavier_init(ember::nn::Transformer& model, ember::Generator* gen);

// Greedy decoding of each source (ids without specials) in batches, with the decoder's
// keys and values cached: at most max_len tokens, stopping at </s>. Returns ids without
// specials. In eval mode; the model's mode is restored. `stop`, when given, is asked
// before each batch: once it says true, the sources decoded so far are returned (fewer
// outputs than sources), so that a stop signal need not wait for a long evaluation.
std::vector<std::vector<int64_t>> greedy_decode(ember::nn::Transformer& model,
                                                const std::vector<std::vector<int64_t>>& sources, int64_t max_len,
                                                int64_t batch_size = 256,
                                                const std::function<bool()>& stop = nullptr);

struct Accuracy {
  double exact = 0;     // fraction of outputs equal to their target
  double per_char = 0;  // matching positions / max(output length, target length), summed over all
  int64_t count = 0;
  int64_t exact_count = 0, matching = 0, positions = 0;  // what the fractions are made of
};
Accuracy accuracy(const std::vector<std::vector<int64_t>>& outputs, const std::vector<std::vector<int64_t>>& targets);
// The counts of an accuracy, {count, exact_count, matching, positions}, and back: the
// accuracy of parts decoded apart (by several processes) from their summed counts.
std::vector<double> counts(const Accuracy& a);
Accuracy combine(const std::vector<double>& counts);

// A checkpoint's data order and position, before training continues from them: the order
// must be a permutation of the training set's indices (a run resumes on the set it began
// with, --train naming it in messages) and the position within it. Errors name the file.
void check_order(const std::vector<int64_t>& order, int64_t position, size_t pairs, const std::string& path,
                 const std::string& train);

}  // namespace ember::seq2seq
