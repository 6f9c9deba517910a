// The translator's commands and their options: what each subcommand takes from the
// command line (options.cpp parses it and dispatches), and the functions that run them
// (train.cpp; inspect.cpp for the commands that read a checkpoint).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "lib/seq2seq/model_options.h"
#include "nn/transformer.h"

namespace ember::translate {

// --watch-curvature given without a number: the interval whose cost bench_suite curvature
// measures (under 10% of training time).
constexpr int64_t kDefaultCurvatureEvery = 500;

struct TrainOptions {
  std::string train = "data/dates/train.tsv", valid = "data/dates/valid.tsv", out = "runs/dates", resume;
  int64_t steps = 3000, batch = 64, warmup = 150, eval_every = 100, save_every = 500, keep = 3, log_every = 50;
  int64_t seed = 1;
  double target_acc = 0.995, lr = 3e-3, clip = 0;
  double z_loss = 0;  // the z-loss's coefficient (seq2seq::z_loss) in the objective; 0: none
  std::string precision = "fp32";  // "bf16": the forward and loss under ember::Autocast
  std::string schedule = "cosine";  // to --min-lr at step --decay-steps; or "inverse-sqrt"
  int64_t decay_steps = 700;
  double min_lr = -1;  // cosine's floor; below 0: --lr / 20
  int threads = 0;
  int64_t check_every = 0;  // data-parallel: compare the ranks' parameters every N steps
  bool watch = false;       // measure attention on a probe batch (lib/watch)
  int64_t watch_every = 50, watch_rows = 64;
  int64_t watch_curvature = 0;  // with --watch: each head's Hessian every N steps (0: never)
  // the model's options (the fields of seq2seq::model_fields() that have a flag); its
  // vocabularies come from the training pairs
  nn::TransformerConfig model = seq2seq::default_model_config();
  std::map<std::string, CLI::Option*> given;  // by flag, to tell which were on the command line
};

// Whether the flag was on the command line.
bool given(const TrainOptions& o, const std::string& flag);

struct EvalOptions {
  std::string checkpoint, data;
  int64_t show = 5;
};

struct DecodeOptions {
  std::string checkpoint;
  std::vector<std::string> texts;
};

struct AttentionOptions {
  std::string checkpoint, out, text;
  int64_t pad = 4;
};

struct WatchOptions {
  std::string checkpoint, data = "data/dates/valid.tsv";
  int64_t rows = 64;
};

// The commands; each returns the program's exit code.
int train(const TrainOptions& o);             // train.cpp
int eval(const EvalOptions& o);               // inspect.cpp
int decode(const DecodeOptions& o);
int attention(const AttentionOptions& o);
int watch_checkpoint(const WatchOptions& o);

}  // namespace ember::translate
