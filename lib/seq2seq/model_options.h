// The translator's model configuration, described once: every field of the
// nn::TransformerConfig a checkpoint stores, with its attribute in the checkpoint's
// /config, its command-line flag (for the fields a user chooses), the range it must be
// in, its help text and what messages call it. The checkpoint's reader and writer, the
// command line, the comparison of a resumed run's options with its checkpoint and the
// data-parallel check that every process trains the same model all walk this table.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "nn/transformer.h"

namespace ember::seq2seq {

// Upper bounds of a model's sizes, for command lines and checkpoints: far past any
// model a CPU trains, and small enough that products of them cannot overflow.
constexpr int64_t kMaxVocab = int64_t(1) << 21;  // every Unicode code point
constexpr int64_t kMaxWidth = int64_t(1) << 16;  // d_model; the feed-forward may be 16x wider
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxLength = int64_t(1) << 20;
constexpr double kMinScoreScale = 1e-6, kMaxScoreScale = 1e6;  // beyond these, scores underflow or overflow

enum class FieldKind {
  Integer,     // int64 in the checkpoint
  Real,        // float64
  Boolean,     // int64, 0 or 1
  Activation,  // the string "relu" or "gelu"
};

struct ModelField {
  const char* key;  // the attribute of the checkpoint's /config
  FieldKind kind;
  double lo, hi;    // the range it must be in, both included (Integer, Real, Boolean)
  // The command line's option, its help and its default; a field without a flag is
  // decided by the data (the vocabularies) or fixed.
  const char* flag = nullptr;
  const char* help = nullptr;
  double initial = 0;
  const char* what = nullptr;  // in messages: "the checkpoint's <what> is 4"
  bool optional = false;       // absent from older checkpoints: then `initial`
  // The field in a configuration, by kind.
  int64_t& (*integer)(nn::TransformerConfig&) = nullptr;
  double& (*real)(nn::TransformerConfig&) = nullptr;
  bool& (*boolean)(nn::TransformerConfig&) = nullptr;
  nn::Activation& (*activation)(nn::TransformerConfig&) = nullptr;
};

// Every field, in the order the command line lists its options and the checks run.
const std::vector<ModelField>& model_fields();

// A field's value as a number (Activation: 0 relu, 1 gelu).
double value_of(const ModelField& f, const nn::TransformerConfig& c);

// The configuration a new translator starts from: nn's, with each option's default.
nn::TransformerConfig default_model_config();

// "d_model 128, 4 heads, 2+2 layers, ffn 512": the model's shape, for people.
std::string describe(const nn::TransformerConfig& c);

// The model's configuration as checkpoint attributes, and back (checked: every key
// present, of the right type, in range; no other key).
ember::io::Config to_config(const nn::TransformerConfig& c);
nn::TransformerConfig from_config(const ember::io::Config& config, const std::string& file);

// The number of parameters of a Transformer of this configuration, and an estimate of
// the memory a training step at this batch size needs (parameters, gradients, Adam's
// moments and activations), to refuse absurd sizes before allocating anything.
double parameter_count(const nn::TransformerConfig& c);
double training_bytes(const nn::TransformerConfig& c, int64_t batch);

}  // namespace ember::seq2seq
