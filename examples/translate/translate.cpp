// translate: a character-level encoder-decoder Transformer that learns to turn dates
// written by people ("sunday, november 22, 2026", "22/11/2026", ...) into ISO dates.
//
//   translate train     [options]                        train (or --resume) on data/dates
//   mpirun -np N translate train [options]               the same, data-parallel over N processes
//   translate eval      --checkpoint C --data FILE       exact-match and per-character accuracy
//   translate decode    --checkpoint C [TEXT ...]        one translation a line (stdin without TEXT)
//   translate attention --checkpoint C --out DIR TEXT    PNG heatmaps of the attention weights
//   translate watch     --checkpoint C                   per head: softmax saturation, gradients
//
// train --watch measures every attention head on a fixed probe batch every --watch-every
// steps (see lib/watch/watch.h) and writes watch.h5, watch.csv and figures into --out.
//
// `translate --help` and `translate COMMAND --help` list every option.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lib/cli/cli.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/storage.h"
#include "dist/ddp.h"
#include "nn/functional.h"
#include "io/checkpoint.h"
#include "optim/schedule.h"
#include "lib/train/stdout_writer.h"
#include "lib/train/training_run.h"
#include "lib/plot/plot.h"
#include "lib/seq2seq/seq2seq.h"
#include "lib/train/trainer.h"
#include "lib/watch/watch.h"

using namespace ember;
using seq2seq::Example;
using text::CharVocab;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

using cli::UsageError;

// ---------------------------------------------------------------- options

struct TrainOptions {
  std::string train = "data/dates/train.tsv", valid = "data/dates/valid.tsv", out = "runs/dates", resume;
  int64_t steps = 3000, batch = 64, warmup = 150, eval_every = 100, save_every = 500, keep = 3, log_every = 50;
  int64_t seed = 1;
  double target_acc = 0.995, lr = 3e-3, clip = 0;
  std::string schedule = "cosine";  // to --min-lr at step --decay-steps; or "inverse-sqrt"
  int64_t decay_steps = 700;
  double min_lr = -1;  // cosine's floor; below 0: --lr / 20
  int threads = 0;
  int64_t check_every = 0;  // data-parallel: compare the ranks' parameters every N steps
  bool watch = false;       // measure attention on a probe batch (lib/watch)
  int64_t watch_every = 50, watch_rows = 64;
  // the model's shape
  int64_t d_model = 128, heads = 4, enc_layers = 2, dec_layers = 2, ffn = 512, max_len = 64;
  double dropout = 0.1, score_scale = 1.0;
  std::map<std::string, CLI::Option*> given;  // by flag, to tell which were on the command line
};

void add_train_options(CLI::App* app, TrainOptions& o) {
  using namespace cli;
  using seq2seq::kMaxLayers, seq2seq::kMaxLength, seq2seq::kMaxWidth, seq2seq::kMinScoreScale, seq2seq::kMaxScoreScale;
  auto& g = o.given;
  g["--train"] = cli::text(*app, "--train", o.train, "training pairs, source<TAB>target a line");
  g["--valid"] = cli::text(*app, "--valid", o.valid, "validation pairs");
  g["--out"] = cli::text(*app, "--out", o.out, "directory for checkpoints, curves.png and the lock");
  g["--resume"] = cli::text(*app, "--resume", o.resume, "continue from checkpoint C, or 'auto': the newest intact one in --out");
  g["--steps"] = integer(*app, "--steps", o.steps, 1, kMaxSteps, "at most this many optimizer steps");
  g["--target-acc"] = real(*app, "--target-acc", o.target_acc, 0, 2, "stop once validation exact match reaches this (2: never)");
  g["--batch"] = integer(*app, "--batch", o.batch, 1, kMaxSize, "pairs per batch");
  g["--d-model"] = integer(*app, "--d-model", o.d_model, 1, kMaxWidth, "model width");
  g["--heads"] = integer(*app, "--heads", o.heads, 1, kMaxWidth, "attention heads (must divide --d-model)");
  g["--enc-layers"] = integer(*app, "--enc-layers", o.enc_layers, 1, kMaxLayers, "encoder layers");
  g["--dec-layers"] = integer(*app, "--dec-layers", o.dec_layers, 1, kMaxLayers, "decoder layers");
  g["--ffn"] = integer(*app, "--ffn", o.ffn, 1, kMaxWidth * 16, "feed-forward width");
  g["--dropout"] = real(*app, "--dropout", o.dropout, 0, 0.99, "dropout probability");
  g["--score-scale"] = real(*app, "--score-scale", o.score_scale, kMinScoreScale, kMaxScoreScale,
                            "multiply every attention's scores by this on top of 1/sqrt(d_k) "
                            "(sqrt(d_k) = sqrt(d_model / heads): unscaled)");
  g["--max-len"] = integer(*app, "--max-len", o.max_len, 2, kMaxLength, "longest sequence, </s> included");
  g["--lr"] = real(*app, "--lr", o.lr, 0, 1e300, "Adam's peak learning rate, reached after --warmup steps");
  g["--warmup"] = integer(*app, "--warmup", o.warmup, 1, kMaxSteps, "warmup steps");
  g["--schedule"] = app->add_option_function<std::string>(
                          "--schedule",
                          [&o](const std::string& v) {
                            if (v != "inverse-sqrt" && v != "cosine")
                              throw UsageError{"--schedule must be inverse-sqrt or cosine, got '" + v + "'"};
                            o.schedule = v;
                          },
                          "after the warmup the learning rate decays as 1/sqrt(step) (inverse-sqrt), or along a "
                          "half cosine to --min-lr at step --decay-steps and stays there (cosine)")
                        ->type_name("inverse-sqrt|cosine")
                        ->default_str(o.schedule);
  g["--decay-steps"] = integer(*app, "--decay-steps", o.decay_steps, 2, kMaxSteps,
                               "with --schedule cosine: the step at which the rate reaches --min-lr");
  g["--min-lr"] = real(*app, "--min-lr", o.min_lr, 0, 1e300, "with --schedule cosine: the final rate")
                      ->default_str("--lr / 20");
  g["--clip"] = real(*app, "--clip", o.clip, 0, 1e12, "clip the gradient norm to this (0: no clipping)");
  g["--eval-every"] = integer(*app, "--eval-every", o.eval_every, 1, kMaxSteps, "validation exact match every N steps");
  g["--save-every"] = integer(*app, "--save-every", o.save_every, 1, kMaxSteps,
                              "checkpoint every N steps (also at the end and on a stop signal: INT, TERM, HUP, USR1, USR2, XCPU)");
  g["--keep"] = integer(*app, "--keep", o.keep, 1, 1000000, "keep the newest N checkpoints");
  g["--log-every"] = integer(*app, "--log-every", o.log_every, 1, kMaxSteps,
                             "a progress line every N steps when not on a terminal");
  g["--seed"] = integer(*app, "--seed", o.seed, 0, int64_t(1) << 53, "initialisation, dropout and data order");
  g["--threads"] = integer(*app, "--threads", o.threads, 1, cli::kMaxThreads, "threads (per process under mpirun)")
                     ->default_str("OMP_NUM_THREADS, else every core (under mpirun: shared among the processes)");
  g["--watch"] = app->add_flag("--watch", o.watch,
                               "measure every attention head (softmax saturation, the gradient through it) on a "
                               "probe batch of the validation pairs; writes watch.h5, watch.csv and figures into --out");
  g["--watch-every"] = integer(*app, "--watch-every", o.watch_every, 1, kMaxSteps, "with --watch: measure every N steps");
  g["--watch-rows"] = integer(*app, "--watch-rows", o.watch_rows, 1, 100000,
                              "with --watch: the probe batch, the first N validation pairs");
  g["--check-every"] = integer(*app, "--check-every", o.check_every, 0, kMaxSteps,
                               "under mpirun: every N steps, check that all processes hold bitwise the same "
                               "parameters (0: never)");
}

bool given(const TrainOptions& o, const std::string& flag) { return o.given.at(flag)->count() > 0; }

// x in as few digits as read back to the same double.
std::string shortest(double x) {
  char b[32];
  auto r = std::to_chars(b, b + sizeof b, x);
  return std::string(b, r.ptr);
}


// ---------------------------------------------------------------- a trained model

struct Loaded {
  std::shared_ptr<nn::Transformer> model;
  CharVocab src_vocab, tgt_vocab;
  io::Checkpoint checkpoint;
};

CharVocab vocab_of(const io::Checkpoint& c, const std::string& name, const std::string& file) {
  auto it = c.vocab.find(name);
  if (it == c.vocab.end()) fail("load", "'", file, "': key '/vocab/", name, "' is missing");
  try {
    return CharVocab::from_tokens(it->second);
  } catch (const Error& e) {
    fail("load", "'", file, "': key '/vocab/", name, "': ", e.what());
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

// The ids of one input line for the model, or an error saying what is wrong with it.
std::vector<int64_t> source_ids(const Loaded& l, const std::string& line) {
  if (line.empty()) throw Error("the input is empty");
  std::vector<int64_t> ids = l.src_vocab.encode(line);
  const int64_t limit = l.model->cfg.max_len - 1;  // room for </s>
  if ((int64_t)ids.size() > limit)
    throw Error(cat_str("the input has ", ids.size(), " characters; this model reads at most ", limit));
  return ids;
}

// ---------------------------------------------------------------- train

struct History {
  std::vector<double> step, loss, eval_step, eval_acc;
};

// The training curves; a figure that cannot be written is a warning (once), never a
// reason to stop training or to lose a checkpoint. Returns whether it was written.
bool write_curves(const std::string& path, const History& h) {
  static bool warned = false;
  plot::Lines loss{"training loss (cross-entropy per target token)", "step", "loss", {{"train", h.step, h.loss}}};
  loss.log_y = true;
  plot::Lines acc{"validation exact match", "step", "accuracy", {{"valid", h.eval_step, h.eval_acc}}};
  acc.ymin = 0, acc.ymax = 1;
  try {
    plot::save_png(path, {loss, acc}, 2, 560, 380);
    return true;
  } catch (const Error& e) {
    if (!warned) {
      std::fflush(stdout);
      std::fprintf(stderr, "translate train: warning: training goes on without the curves: %s\n", e.what());
    }
    warned = true;
    return false;
  }
}

// The newest checkpoint of the directory that reads back whole; damaged ones are named
// and skipped.
std::optional<std::string> newest_intact(const io::CheckpointManager& ckpts, const std::string& out) {
  auto all = ckpts.list();
  std::vector<std::string> damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      io::read_checkpoint(*it);
      return *it;
    } catch (const Error& e) {
      // renamed out of the numbered series (the bytes are kept), so that the new run's
      // saves are never rotated away in favour of it
      const std::string aside = *it + ".damaged";
      const bool moved = std::rename(it->c_str(), aside.c_str()) == 0;
      std::fflush(stdout);
      std::fprintf(stderr, "translate train: warning: %s is damaged (%s); %s, trying an older checkpoint\n", it->c_str(),
                   e.what(), moved ? ("moved it to " + aside).c_str() : "left it in place");
      damaged.push_back(*it);
    }
  }
  if (!damaged.empty())
    fail("translate train", "none of the ", damaged.size(), " checkpoints in '", out,
         "' is intact (see the warnings above); start afresh in another --out");
  return std::nullopt;
}

// The checkpoint's dropout stream: /rng/dropout, or /rng/default in checkpoints written
// when dropout drew from the default generator. Its seed is the run's --seed.
std::string dropout_stream(const io::Checkpoint& c) { return c.generators.count("dropout") ? "dropout" : "default"; }

// A new run's schedule options: consistent, and none that its schedule would ignore.
void check_new_schedule(const TrainOptions& o) {
  if (o.schedule == "cosine") {
    if (o.decay_steps <= o.warmup)
      throw UsageError{cat_str("--decay-steps (", o.decay_steps, ") must be larger than --warmup (", o.warmup, ")"),
                       "train"};
    if (o.min_lr > o.lr)
      throw UsageError{cat_str("--min-lr (", shortest(o.min_lr), ") must not exceed --lr (", shortest(o.lr), ")"),
                       "train"};
    return;
  }
  for (const char* flag : {"--decay-steps", "--min-lr"})
    if (given(o, flag)) throw UsageError{cat_str(flag, " applies to --schedule cosine only"), "train"};
}

// The schedule's name on the command line, from its kind in checkpoints.
std::string schedule_name(const std::string& kind) {
  return kind == "InverseSqrt" ? "inverse-sqrt" : kind == "WarmupCosine" ? "cosine" : kind;
}

// A new run's schedule: linear warmup to --lr, then 1/sqrt(step) or a half cosine.
std::unique_ptr<optim::Schedule> new_schedule(const TrainOptions& o, int64_t d_model) {
  if (o.schedule == "cosine") {
    const double min_lr = o.min_lr >= 0 ? o.min_lr : o.lr / 20;
    return std::make_unique<optim::WarmupCosineSchedule>(o.lr, o.warmup, o.decay_steps, min_lr);
  }
  // lr = peak * min(step / warmup, sqrt(warmup / step)) = factor * min(...) / sqrt(d_model * warmup)
  return std::make_unique<optim::InverseSqrtSchedule>(d_model, o.warmup, o.lr * std::sqrt(double(d_model * o.warmup)));
}

// A resumed run's schedule: the checkpoint's, which must be one that train writes.
std::unique_ptr<optim::Schedule> resumed_schedule(const io::Checkpoint& c, const nn::TransformerConfig& cfg,
                                                  const std::string& path) {
  const std::string what = "key '/schedule' should hold an inverse-sqrt or a cosine schedule with a warmup of at "
                           "least 1 step and a positive, finite peak";
  if (!c.schedule || (c.schedule->kind != "InverseSqrt" && c.schedule->kind != "WarmupCosine"))
    fail("translate train", "'", path, "': ", what, c.schedule ? cat_str(" (it holds '", c.schedule->kind, "')") : "");
  std::unique_ptr<optim::Schedule> s;
  try {
    s = optim::make_schedule(c.schedule->kind, c.schedule->settings);
  } catch (const Error& e) {
    fail("translate train", "'", path, "': ", what, ": ", e.what());
  }
  const auto& v = c.schedule->settings;
  const double warmup = v.at("warmup"), peak = s->lr_at(std::max<int64_t>(1, std::llround(warmup)));
  if (!(warmup >= 1 && warmup <= double(cli::kMaxSteps)) || !(peak > 0) || !std::isfinite(peak))
    fail("translate train", "'", path, "': ", what, " (warmup ", shortest(warmup), ", peak ", shortest(peak), ")");
  if (c.schedule->kind == "InverseSqrt" && v.at("d_model") != double(cfg.d_model))
    fail("translate train", "'", path, "': key '/schedule' attribute 'd_model' is ", shortest(v.at("d_model")),
         ", the model's d_model is ", cfg.d_model);
  if (c.schedule->last_step != c.progress.step)
    fail("translate train", "'", path, "': key '/schedule' attribute 'last_step' is ", c.schedule->last_step,
         ", but the run is at step ", c.progress.step, " ('/progress')");
  return s;
}

// On resume the checkpoint decides the model and the schedule. Says, for each option given,
// whether it applies; refuses those that would change what the checkpoint fixed.
void check_resume_options(const TrainOptions& o, const io::Checkpoint& c, const nn::TransformerConfig& cfg,
                          const std::string& path) {
  std::vector<std::string> applies, matches, refused;
  auto compare = [&](const std::string& flag, double want, double have, const std::string& what) {
    if (!given(o, flag)) return;
    const std::string text = flag + " " + o.given.at(flag)->as<std::string>();
    if (std::abs(want - have) <= 1e-12 * std::max(1.0, std::abs(have))) matches.push_back(text);
    else refused.push_back(cat_str(text, " (the checkpoint's ", what, " is ", shortest(have), ")"));
  };
  compare("--d-model", double(o.d_model), double(cfg.d_model), "d_model");
  compare("--heads", double(o.heads), double(cfg.nhead), "number of heads");
  compare("--enc-layers", double(o.enc_layers), double(cfg.num_encoder_layers), "number of encoder layers");
  compare("--dec-layers", double(o.dec_layers), double(cfg.num_decoder_layers), "number of decoder layers");
  compare("--ffn", double(o.ffn), double(cfg.dim_feedforward), "feed-forward width");
  compare("--max-len", double(o.max_len), double(cfg.max_len), "maximum length");
  compare("--dropout", o.dropout, cfg.dropout, "dropout");
  compare("--score-scale", o.score_scale, cfg.score_scale, "score scale");
  // the schedule
  if (c.schedule) {
    const auto& k = c.schedule->kind;
    const auto& v = c.schedule->settings;
    if (given(o, "--schedule") && o.schedule == schedule_name(k)) matches.push_back("--schedule " + o.schedule);
    else if (given(o, "--schedule"))
      refused.push_back(cat_str("--schedule ", o.schedule, " (the checkpoint's schedule is ", schedule_name(k), ")"));
    if (k == "InverseSqrt" && v.count("warmup") && v.count("factor") && v.count("d_model")) {
      compare("--warmup", double(o.warmup), v.at("warmup"), "warmup");
      compare("--lr", o.lr, v.at("factor") / std::sqrt(v.at("d_model") * v.at("warmup")), "peak learning rate");
      for (const char* flag : {"--decay-steps", "--min-lr"})
        if (given(o, flag))
          refused.push_back(cat_str(flag, " ", o.given.at(flag)->as<std::string>(),
                                    " (the checkpoint's schedule is inverse-sqrt, which has none)"));
    }
    if (k == "WarmupCosine" && v.count("warmup") && v.count("peak_lr") && v.count("total") && v.count("min_lr")) {
      compare("--warmup", double(o.warmup), v.at("warmup"), "warmup");
      compare("--lr", o.lr, v.at("peak_lr"), "peak learning rate");
      compare("--decay-steps", double(o.decay_steps), v.at("total"), "decay steps");
      if (o.min_lr >= 0) compare("--min-lr", o.min_lr, v.at("min_lr"), "final learning rate");
    }
  }
  if (c.generators.count(dropout_stream(c)))
    compare("--seed", double(o.seed), double(c.generators.at(dropout_stream(c))[0]), "seed");
  for (const char* flag : {"--train", "--valid", "--steps", "--target-acc", "--batch", "--clip", "--eval-every",
                           "--save-every", "--keep", "--log-every", "--threads", "--watch", "--watch-every",
                           "--watch-rows"})
    if (given(o, flag)) applies.push_back(std::string(flag) + " " + o.given.at(flag)->as<std::string>());
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + v[i];
    return s;
  };
  if (!refused.empty())
    fail("translate train", "on resume from '", path, "' these options cannot change what the checkpoint fixed: ",
         join(refused), ". Leave them out to continue as the run began, or start a new run in another --out");
  if (!applies.empty()) std::printf("on resume: %s apply from here on\n", join(applies).c_str());
  if (!matches.empty()) std::printf("on resume: %s match the checkpoint\n", join(matches).c_str());
}

// A pair longer than the model reads: the file, the line and the side.
// who names the command in messages, and limit where max_len comes from.
void check_lengths(const std::vector<text::Pair>& pairs, const std::vector<Example>& set, const std::string& file,
                   int64_t max_len, const char* who = "translate train", const char* limit = "--max-len") {
  for (size_t i = 0; i < set.size(); i++)
    for (auto [side, n] : {std::pair<const char*, size_t>{"source", set[i].source.size()}, {"target", set[i].target.size()}})
      if ((int64_t)n + 1 > max_len)
        fail(who, file, ":", pairs[i].line, ": the ", side, " has ", n, " characters, but ", limit, " ", max_len,
             " leaves room for ", max_len - 1, " (one position is </s>)");
}

// Checkpoints of another history in --out would be rotated in among this run's: the
// resumed checkpoint must be --out's own newest, or --out must hold none.
void check_resume_place(const io::CheckpointManager& ckpts, const std::string& out, const std::string& resume,
                        int64_t step) {
  const std::vector<std::string> all = ckpts.list();
  if (all.empty()) return;
  std::error_code ec;
  size_t at = all.size();
  for (size_t i = 0; i < all.size(); i++)
    if (fs::equivalent(all[i], resume, ec)) at = i;
  auto names = [&](size_t from) {
    std::string s;
    for (size_t i = from; i < all.size(); i++) s += (i > from ? ", " : "") + fs::path(all[i]).filename().string();
    return s;
  };
  if (at == all.size())
    fail("translate train", "'", out, "' holds checkpoints of another run (", names(0), "); resuming '", resume,
         "' there would rotate them away. Resume into another --out, or move them first");
  if (at + 1 < all.size())
    fail("translate train", "'", out, "' holds checkpoints past step ", step, " (", names(at + 1),
         "): resuming from step ", step, " would rotate them away. Move them elsewhere first, or resume into "
         "another --out");
}

// Ranks of a data-parallel run on one machine share its cores: without --threads (or
// OMP_NUM_THREADS) each takes its share.
int threads_per_rank() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local ? std::max(1, std::atoi(local)) : dist::world_size();
  return std::max(1, num_threads() / ranks_here);
}

// The sum over the ranks of a few numbers (one collective).
std::vector<double> sum_over_ranks(std::vector<double> v) {
  Tensor t = from_vector(v, {(int64_t)v.size()}).to(kFloat64);
  dist::allreduce(t);
  return t.to_vector<double>();
}

// The batch's loss (the ranks' shares summed in rank order: the same bits everywhere) and
// the first stop signal any rank received (0: none), in one collective.
std::pair<double, int> exchange(double loss_share, int signal) {
  Tensor all = dist::allgather(from_vector(std::vector<double>{loss_share, double(signal)}, {2}).to(kFloat64));
  const std::vector<double> v = all.to_vector<double>();
  double loss = 0;
  int first = 0;
  for (size_t r = 0; r + 1 < v.size(); r += 2) {
    loss += v[r];
    if (!first && v[r + 1] != 0) first = (int)v[r + 1];
  }
  return {loss, first};
}

// What a resumed process starts from, in the parts dist::check_same_on_all_ranks names:
// two checkpoints of one step (ckpt-00000020.h5 of two runs) pass the check of options,
// data and step, and differ here.
std::vector<dist::Part> resumed_state(const optim::NamedParams& params, const optim::Optimizer& opt,
                                      const optim::Schedule& sched, const io::Progress& progress,
                                      const std::vector<int64_t>& order, const Generator& data_gen,
                                      const Generator& dropout_gen, const CharVocab& src_vocab,
                                      const CharVocab& tgt_vocab) {
  auto int64s = [](const std::vector<uint64_t>& v) {
    return from_vector(std::vector<int64_t>(v.begin(), v.end()), {(int64_t)v.size()});
  };
  auto numbers = [](const std::map<std::string, double>& m) {
    std::vector<double> v;
    for (const auto& [name, x] : m) v.push_back(x);
    return from_vector(v, {(int64_t)v.size()});
  };
  std::vector<Tensor> weights, moments;
  for (const auto& [name, p] : params) weights.push_back(p.detach());
  const optim::OptimizerState state = opt.state();
  moments.push_back(numbers(state.hyper));
  for (const auto& [name, p] : state.params) {
    moments.push_back(from_vector(std::vector<int64_t>{p.step}, {1}));
    for (const auto& [slot, t] : p.slots) moments.push_back(t);
  }
  std::string tokens;
  for (const CharVocab* v : {&src_vocab, &tgt_vocab})
    for (const std::string& t : v->tokens()) tokens += t + '\0';
  return {{"parameters", weights},
          {"optimizer state", moments},
          {"schedule", {numbers(sched.settings()), int64s({(uint64_t)sched.last_step()})}},
          {"data order",
           {from_vector(order, {(int64_t)order.size()}), int64s(data_gen.get_state()),
            int64s({(uint64_t)progress.epoch, (uint64_t)progress.position})}},
          {"dropout stream", {int64s(dropout_gen.get_state())}},
          {"vocabularies", {from_vector(std::vector<int64_t>(tokens.begin(), tokens.end()), {(int64_t)tokens.size()})}}};
}

// ---------------------------------------------------------------- watching attention

// Every attention module of the translator, by role and layer.
std::vector<watch::Site> sites_of(nn::Transformer& m) {
  std::vector<watch::Site> sites;
  for (int64_t i = 0; i < m.cfg.num_encoder_layers; i++)
    sites.push_back({"encoder_self", i, m.encoder->layer((size_t)i)->self_attn.get()});
  for (int64_t i = 0; i < m.cfg.num_decoder_layers; i++)
    sites.push_back({"decoder_self", i, m.decoder->layer((size_t)i)->self_attn.get()});
  for (int64_t i = 0; i < m.cfg.num_decoder_layers; i++)
    sites.push_back({"decoder_cross", i, m.decoder->layer((size_t)i)->cross_attn.get()});
  return sites;
}

// The probe: the first `rows` examples of a set, teacher-forced, with the training loss
// (the mean cross-entropy over target tokens).
watch::Probe probe_of(nn::Transformer& model, const std::vector<Example>& set, int64_t rows) {
  std::vector<const Example*> first;
  for (size_t i = 0; i < std::min(set.size(), (size_t)rows); i++) first.push_back(&set[i]);
  const seq2seq::Batch b = seq2seq::make_batch(first);
  watch::Probe p;
  p.model = &model;
  p.sites = sites_of(model);
  const int64_t vocab = model.cfg.tgt_vocab;
  p.loss = [&model, b, vocab] {
    Tensor logits = model.forward(b.src, b.tgt_in);
    return nn::cross_entropy(logits.reshape({-1, vocab}), b.tgt_out.reshape({-1}), CharVocab::kPad);
  };
  const Tensor target_padding = eq(b.tgt_in, double(CharVocab::kPad));
  p.query_padding = {{"encoder_self", eq(b.src, double(CharVocab::kPad))},
                     {"decoder_self", target_padding},
                     {"decoder_cross", target_padding}};
  return p;
}

// What a watch file says about the run it comes from.
std::map<std::string, std::string> watch_info(const std::string& program, const nn::TransformerConfig& cfg,
                                              int64_t rows, const std::string& data) {
  return {{"program", program},
          {"model", cat_str("d_model ", cfg.d_model, ", ", cfg.nhead, " heads, ", cfg.num_encoder_layers, "+",
                            cfg.num_decoder_layers, " layers, ffn ", cfg.dim_feedforward)},
          {"head_dim", cat_str(cfg.d_model / cfg.nhead)},
          {"score_scale", cat_str(cfg.score_scale)},
          {"probe", cat_str("the first ", rows, " pairs of ", data)}};
}

int train(const TrainOptions& o) {
  // Data-parallel under mpirun: every rank runs this function on its own rows of each
  // batch; rank 0 alone writes (progress, curves, checkpoints), and the others' stdout is
  // silenced.
  const int rank = dist::rank(), world = dist::world_size();
  const bool leader = rank == 0;
  if (!leader) std::freopen("/dev/null", "w", stdout);
  if (given(o, "--threads")) set_num_threads(o.threads);
  else if (world > 1 && !std::getenv("OMP_NUM_THREADS")) set_num_threads(threads_per_rank());
  // the data files first: a bad line is named before options that disagree
  auto train_pairs = text::read_pairs(o.train);
  auto valid_pairs = text::read_pairs(o.valid);
  if (!(o.lr > 0)) throw UsageError{"--lr must be positive, got 0", "train"};
  if (!given(o, "--resume")) check_new_schedule(o);  // a resumed run's schedule is its checkpoint's
  std::optional<training::RunDirectory> run_dir;  // created, writable, locked, swept: by rank 0
  if (leader) run_dir.emplace(o.out, "translate train");
  dist::barrier();
  training::StopSignals signals;  // from here on a stop signal is answered by the loop
  // progress that a reader who stops reading (mpirun shutting the job down, a full pipe)
  // cannot hold up: a stop is saved whatever becomes of standard output
  std::optional<training::StdoutWriter> output;
  if (leader) output.emplace();
  if (leader && !run_dir->removed().empty())
    std::printf("removed %zu temporary file(s) left by interrupted saves in %s\n", run_dir->removed().size(),
                o.out.c_str());
  io::CheckpointManager ckpts(o.out, (int)o.keep, "ckpt");

  // The checkpoint to resume from, if any: its configuration and vocabularies win.
  std::optional<std::string> resume;
  if (given(o, "--resume")) {
    if (o.resume == "auto") {
      // rank 0 first: it moves damaged checkpoints aside, which the others then do not see
      if (leader) resume = newest_intact(ckpts, o.out);
      dist::barrier();
      if (!leader) resume = newest_intact(ckpts, o.out);
      if (!resume) std::printf("no checkpoint in %s: starting afresh\n", o.out.c_str());
    } else {
      resume = o.resume;
    }
  }
  if (!resume && ckpts.latest())
    fail("translate train", "'", o.out, "' already holds checkpoints (", *ckpts.latest(),
         "); continue with --resume auto, or choose another --out");
  if (!resume && given(o, "--resume")) check_new_schedule(o);  // --resume auto found nothing: a new run
  std::optional<io::Checkpoint> previous;
  if (resume) {
    previous = io::read_checkpoint(*resume);
    check_resume_place(ckpts, o.out, *resume, previous->progress.step);
  }

  nn::TransformerConfig cfg;
  CharVocab src_vocab, tgt_vocab;
  if (previous) {
    cfg = seq2seq::from_config(previous->config, *resume);
    src_vocab = vocab_of(*previous, "source", *resume);
    tgt_vocab = vocab_of(*previous, "target", *resume);
    check_resume_options(o, *previous, cfg, *resume);
  } else {
    if (o.d_model % o.heads != 0)
      throw UsageError{cat_str("--heads ", o.heads, " must divide --d-model ", o.d_model), "train"};
    std::vector<std::string> sources, targets;
    for (auto& p : train_pairs) sources.push_back(p.source), targets.push_back(p.target);
    src_vocab = CharVocab::build(sources);
    tgt_vocab = CharVocab::build(targets);
    cfg.src_vocab = src_vocab.size();
    cfg.tgt_vocab = tgt_vocab.size();
    cfg.d_model = o.d_model;
    cfg.nhead = o.heads;
    cfg.num_encoder_layers = o.enc_layers;
    cfg.num_decoder_layers = o.dec_layers;
    cfg.dim_feedforward = o.ffn;
    cfg.dropout = o.dropout;
    cfg.max_len = o.max_len;
    cfg.score_scale = o.score_scale;
  }
  const int64_t rows_here = (o.batch + world - 1) / world;  // this process's part of a batch
  cli::check_fits_in_memory("translate train", seq2seq::training_bytes(cfg, rows_here),
                            cat_str("training a ", std::llround(seq2seq::parameter_count(cfg)),
                                    "-parameter model at --batch ", o.batch,
                                    world > 1 ? cat_str(" (", rows_here, " rows in this process)") : std::string(),
                                    " and --max-len ", cfg.max_len));
  std::vector<Example> train_set = seq2seq::encode_pairs(train_pairs, o.train, src_vocab, tgt_vocab);
  std::vector<Example> valid_set = seq2seq::encode_pairs(valid_pairs, o.valid, src_vocab, tgt_vocab);
  check_lengths(train_pairs, train_set, o.train, cfg.max_len);
  check_lengths(valid_pairs, valid_set, o.valid, cfg.max_len);
  int64_t longest_target = 0;
  for (auto& e : valid_set) longest_target = std::max<int64_t>(longest_target, (int64_t)e.target.size());
  // Every process must train the same job: the same options, data and checkpoint (an --out
  // that only some machines see, or another data file on one of them, would otherwise
  // train something else, or hang at the end). Checked before anything is trained.
  if (world > 1) {
    std::string job = cat_str(o.steps, ' ', o.batch, ' ', o.seed, ' ', o.lr, ' ', o.warmup, ' ', o.schedule, ' ',
                              o.decay_steps, ' ', o.min_lr, ' ', o.clip, ' ', o.dropout,
                              ' ', o.target_acc, ' ', o.eval_every, ' ', o.save_every, ' ', o.check_every, ' ',
                              cfg.score_scale, ' ',
                              cfg.d_model, ' ', cfg.nhead, ' ', cfg.num_encoder_layers, ' ', cfg.num_decoder_layers, ' ',
                              cfg.dim_feedforward, ' ', cfg.max_len, ' ', previous ? previous->progress.step : -1, '\n');
    for (const auto* set : {&train_pairs, &valid_pairs})
      for (const auto& p : *set) job += p.source + '\t' + p.target + '\n';
    Tensor bytes = from_vector(std::vector<int64_t>(job.begin(), job.end()), {(int64_t)job.size()});
    dist::check_same_on_all_ranks(
        {bytes}, cat_str("options, data files or checkpoint (here: ",
                         previous ? cat_str("step ", previous->progress.step, " of ", *resume) : std::string("none"),
                         ")"));
  }

  // three streams: initialisation, dropout masks, data order (dropout's is checkpointed
  // with the data order's, so that a resumed run draws the masks it would have drawn)
  Generator init_gen((uint64_t)o.seed * 1000003 + 17), dropout_gen((uint64_t)o.seed),
      data_gen((uint64_t)o.seed * 7919 + 3);
  cfg.dropout_gen = &dropout_gen;
  auto model = std::make_shared<nn::Transformer>(cfg, &init_gen);
  seq2seq::xavier_init(*model, &init_gen);
  auto params = model->named_parameters();
  // on resume the schedule is the checkpoint's (check_resume_options refused a new one)
  std::unique_ptr<optim::Schedule> sched = previous ? resumed_schedule(*previous, cfg, *resume) : new_schedule(o, cfg.d_model);
  optim::Adam opt(params, {.lr = sched->lr_at(1), .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});

  io::Progress progress;
  std::vector<int64_t> order;
  History hist;
  if (previous) {
    io::ResumeTargets t;
    t.model = model->state_dict();
    t.optimizer = &opt;
    t.schedule = sched.get();
    t.generators = {{dropout_stream(*previous), &dropout_gen}, {"data", &data_gen}};
    t.config = previous->config;
    io::Checkpoint c = io::load_checkpoint(*resume, t);
    progress = c.progress;
    if (!c.extra.count("order") || c.extra.at("order").dtype() != kInt64 || c.extra.at("order").dim() != 1)
      fail("translate train", "'", *resume, "': key '/extra/order' should hold the data order, int64 [pairs]");
    order = c.extra.at("order").to_vector<int64_t>();
    seq2seq::check_order(order, progress.position, train_set.size(), *resume, o.train);
    auto series = [&](const char* name, std::vector<double>& x, std::vector<double>& y) {
      if (!c.extra.count(name)) return;
      auto v = c.extra.at(name).to_vector<double>();
      for (size_t i = 0; i + 1 < v.size(); i += 2) x.push_back(v[i]), y.push_back(v[i + 1]);
    };
    series("loss_history", hist.step, hist.loss);
    series("valid_history", hist.eval_step, hist.eval_acc);
    std::string ranks;
    if (c.extra.count("world_size")) {
      const Tensor& w = c.extra.at("world_size");
      if (w.dtype() != kInt64 || w.numel() != 1 || w.to_vector<int64_t>()[0] < 1)
        fail("translate train", "'", *resume, "': key '/extra/world_size' should hold the number of processes that ",
             "saved it, an int64 >= 1 of shape [1]; got ", dtype_name(w.dtype()), " ", w.shape());
      ranks = cat_str(", saved by ", w.to_vector<int64_t>()[0], " process(es)");
    }
    std::printf("resumed from %s at step %lld (epoch %lld, pair %lld of the epoch%s)\n", resume->c_str(),
                (long long)progress.step, (long long)progress.epoch, (long long)progress.position, ranks.c_str());
  }
  // A checkpoint named alike on every machine may hold another run's state on one of them:
  // refused, on every rank, before DDP hands out rank 0's parameters and before any step.
  if (world > 1 && previous)
    dist::check_same_on_all_ranks(resumed_state(params, opt, *sched, progress, order, data_gen, dropout_gen, src_vocab,
                                                tgt_vocab),
                                  cat_str("after loading step ", progress.step, " of ", *resume,
                                          ": every process must resume the same checkpoint"));
  // every rank starts from rank 0's parameters; gradients are summed over the ranks, each
  // rank's loss being its share of the batch's mean (see the step)
  std::optional<dist::DistributedDataParallel> ddp;
  if (world > 1) ddp.emplace(*model, dist::DDPOptions{.reduce = dist::ReduceOp::Sum});

  // the watch: rank 0 measures its probe batch (no collective: the others do not wait for it)
  std::optional<watch::Recorder> watcher;
  if (o.watch && leader) {
    const int64_t rows = std::min<int64_t>(o.watch_rows, (int64_t)valid_set.size());
    watcher.emplace(probe_of(*model, valid_set, rows), o.out, o.watch_every, "translate train",
                    watch_info("translate train", cfg, rows, o.valid));
    if (previous) watcher->resume(progress.step);
  }

  auto new_epoch_order = [&] {
    order.resize(train_set.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = (int64_t)i;
    for (size_t i = order.size() - 1; i > 0; i--) std::swap(order[i], order[data_gen.next_u64() % (i + 1)]);
  };
  if (order.empty()) new_epoch_order();

  // What one save holds: the model, the optimizer, the schedule, both generators, the
  // place in the data, the vocabularies and the curves so far.
  auto make_checkpoint = [&] {
    io::Checkpoint c = io::make_checkpoint(model->state_dict(), &opt, sched.get(),
                                           {{"dropout", &dropout_gen}, {"data", &data_gen}}, progress,
                                           seq2seq::to_config(cfg));
    c.vocab["source"] = src_vocab.tokens();
    c.vocab["target"] = tgt_vocab.tokens();
    c.extra["order"] = from_vector(order, {(int64_t)order.size()});
    c.extra["world_size"] = from_vector(std::vector<int64_t>{world}, {1});
    auto pairs = [](const std::vector<double>& x, const std::vector<double>& y) {
      std::vector<double> v;
      for (size_t i = 0; i < x.size(); i++) v.push_back(x[i]), v.push_back(y[i]);
      return from_vector(v, {(int64_t)x.size(), 2});
    };
    c.extra["loss_history"] = pairs(hist.step, hist.loss);
    c.extra["valid_history"] = pairs(hist.eval_step, hist.eval_acc);
    return c;
  };

  std::vector<std::vector<int64_t>> valid_sources, valid_targets;
  for (auto& e : valid_set) valid_sources.push_back(e.source), valid_targets.push_back(e.target);

  std::printf("training a %lld-parameter Transformer (d_model %lld, %lld heads, %lld+%lld layers, ffn %lld) on %zu pairs, "
              "%s%d thread(s)%s\n",
              (long long)model->num_parameters(), (long long)cfg.d_model, (long long)cfg.nhead,
              (long long)cfg.num_encoder_layers, (long long)cfg.num_decoder_layers, (long long)cfg.dim_feedforward,
              train_set.size(), world > 1 ? cat_str(world, " processes x ").c_str() : "", num_threads(),
              world > 1 ? " each" : "");
  const std::string curves = (fs::path(o.out) / "curves.png").string();
  const double best_before = hist.eval_acc.empty() ? 0 : hist.eval_acc.back();
  const bool reached_before = !hist.eval_acc.empty() && best_before >= o.target_acc;
  if (progress.step >= o.steps || reached_before) {
    std::printf("nothing to train: the checkpoint is at step %lld and %s\n", (long long)progress.step,
                reached_before ? "has already reached --target-acc" : cat_str("--steps is ", o.steps).c_str());
    std::printf("checkpoint: %s\n", resume->c_str());
    return 0;
  }

  training::Trainer trainer({.program = "translate train",
                          .first_step = progress.step,
                          .steps = o.steps,
                          .log_every = o.log_every,
                          .eval_every = o.eval_every,
                          .save_every = o.save_every,
                          .target = o.target_acc,
                          .last_saved = resume ? *resume : std::string(),
                          .resume_hint = "resume with --resume auto",
                          .plain = dist::launched_by_mpirun()});
  // steps after step 100, those of them in which the allocator took memory from the system, and how much
  int64_t steady_steps = 0, steady_grew = 0, steady_growth = 0;
  double lr = 0;
  int agreed_signal = 0;  // data-parallel: the stop signal of the last step's exchange
  model->train();

  trainer.step = [&] {
    if (progress.position >= (int64_t)order.size()) {
      progress.epoch++;
      progress.position = 0;
      new_epoch_order();
    }
    std::vector<const Example*> batch;  // the global batch, the same on every rank
    for (int64_t k = 0; k < o.batch && progress.position < (int64_t)order.size(); k++)
      batch.push_back(&train_set[(size_t)order[(size_t)progress.position++]]);
    int64_t batch_tokens = 0;
    for (auto* e : batch) batch_tokens += (int64_t)e->target.size() + 1;  // target + </s>
    // this rank's rows; their dropout masks are the ones one process would draw for them
    const dist::Shard mine = dist::shard((int64_t)batch.size(), rank, world);
    const std::vector<const Example*> rows(batch.begin() + mine.first, batch.begin() + mine.first + mine.count);
    dropout_gen.set_sample_offset(mine.first);

    const int64_t held_before = Storage::system_bytes();
    lr = sched->step(opt);
    opt.zero_grad();
    // The loss is the mean over the batch's target tokens. A rank's share of it is the
    // mean over its own tokens weighted by their part of the batch's, so that the shares'
    // gradients, summed over the ranks, are the gradient of the mean.
    Tensor loss;
    double loss_value = 0;
    if (!rows.empty()) {
      seq2seq::Batch b = seq2seq::make_batch(rows);
      Tensor logits = model->forward(b.src, b.tgt_in);
      loss = nn::cross_entropy(logits.reshape({-1, cfg.tgt_vocab}), b.tgt_out.reshape({-1}), CharVocab::kPad);
      if (world > 1) loss = mul(loss, double(b.target_tokens) / double(batch_tokens));
      loss_value = loss.item();
    }
    if (world == 1 && !std::isfinite(loss_value)) return training::StepResult{.loss = loss_value};  // the trainer stops here
    if (loss.defined()) loss.backward();
    else ddp->join();  // no rows for this rank: it takes part in the reduction all the same
    if (world > 1) {
      // a rank without rows drew no dropout masks: all go on from rank 0's stream
      if ((int64_t)batch.size() < world) dist::broadcast(dropout_gen, 0);
      // one exchange after the reduction (the ranks are in step there): the batch's loss,
      // and the stop signal all ranks answer before the next step
      std::tie(loss_value, agreed_signal) = exchange(loss_value, training::StopSignals::received());
      if (!std::isfinite(loss_value)) return training::StepResult{.loss = loss_value};  // before any update
    }
    if (o.clip > 0) optim::clip_grad_norm(params, o.clip);
    opt.step();
    progress.step++;
    if (ddp && o.check_every > 0 && progress.step % o.check_every == 0) ddp->check_parameters();
    if (watcher) watcher->after_step(progress.step);
    if (progress.step > 100) {
      const int64_t grown = Storage::system_bytes() - held_before;
      steady_steps++, steady_grew += grown > 0, steady_growth += grown;
    }
    return training::StepResult{.loss = loss_value, .tokens = batch_tokens};
  };
  trainer.progress_fields = [&] {
    char b[64];
    std::snprintf(b, sizeof b, "epoch %lld  lr %.2e  ", (long long)progress.epoch, lr);
    return std::string(b);
  };
  trainer.on_log = [&](int64_t step, double mean_loss) {
    hist.step.push_back(double(step));
    hist.loss.push_back(mean_loss);
  };
  if (world > 1) trainer.agree_on_signal = [&](int) { return agreed_signal; };
  // Each rank decodes its part of the validation pairs; the counts are summed.
  const dist::Shard valid_part = dist::shard((int64_t)valid_set.size(), rank, world);
  const std::vector<std::vector<int64_t>> my_sources(valid_sources.begin() + valid_part.first,
                                                     valid_sources.begin() + valid_part.first + valid_part.count),
      my_targets(valid_targets.begin() + valid_part.first, valid_targets.begin() + valid_part.first + valid_part.count);
  trainer.evaluate = [&] {
    std::vector<std::vector<int64_t>> outputs;
    if (!my_sources.empty()) outputs = seq2seq::greedy_decode(*model, my_sources, longest_target + 2);
    seq2seq::Accuracy acc = seq2seq::accuracy(outputs, my_targets);
    if (world > 1) acc = seq2seq::combine(sum_over_ranks(seq2seq::counts(acc)));
    hist.eval_step.push_back(double(progress.step));
    hist.eval_acc.push_back(acc.exact);
    std::printf("%sstep %lld: validation exact match %.2f%%, per character %.2f%% (%.0f s of training)\n",
                trainer.on_terminal() ? "\n" : "", (long long)progress.step, 100 * acc.exact, 100 * acc.per_char,
                trainer.train_seconds());
    if (leader) write_curves(curves, hist);
    return acc.exact;
  };
  // A save that fails (a full disk) ends the run: going on would only pile up more work
  // that cannot be kept. The previous checkpoint is untouched.
  trainer.save = [&](const std::string&) {
    if (!leader) return ckpts.path_for(progress.step);  // rank 0 writes it
    std::string path = ckpts.save(make_checkpoint());
    if (watcher) watcher->write(/*figures=*/false);  // the numbers; figures at the end
    for (const std::string& failure : ckpts.pruning_failures()) {
      std::fflush(stdout);
      std::fprintf(stderr, "translate train: warning: cannot remove the old checkpoint %s (--keep %lld)\n",
                   failure.c_str(), (long long)o.keep);
    }
    return path;
  };

  if (watcher) watcher->after_step(progress.step);  // where training starts
  // the watch's files are written at every save; a run that stops on a loss that is not
  // finite saves nothing, and its last measurements are the ones worth seeing
  if (int code = trainer.run(); code != 0) {
    if (watcher) watcher->write();
    return code;
  }
  const bool drew = leader && write_curves(curves, hist);
  std::printf("done: %lld steps, %.1f s of training (%.1f s wall), best validation exact match %.2f%%\n",
              (long long)progress.step, trainer.train_seconds(), trainer.wall_seconds(),
              100 * std::max(best_before, trainer.best()));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf("memory: peak %.0f MB resident; the allocator holds %.0f MB; %lld of %lld training steps after step 100 "
              "took no memory from the system (the other %lld: %.0f KB in all)\n",
              double(ru.ru_maxrss) / 1024.0, double(Storage::system_bytes()) / 1048576.0,
              (long long)(steady_steps - steady_grew), (long long)steady_steps, (long long)steady_grew,
              double(steady_growth) / 1024.0);
  if (ddp) {
    const auto& st = ddp->stats();
    std::printf("communication: %.1f s in MPI calls (%.1f%% of training), %.1f s of it waiting after backward; "
                "%.2f MB of gradients reduced per step\n",
                st.mpi_seconds, 100 * st.mpi_seconds / std::max(trainer.train_seconds(), 1e-9), st.wait_seconds,
                st.reductions ? double(st.bytes) / double(st.reductions) / 1048576.0 : 0.0);
  }
  std::printf("checkpoint: %s\ncurves: %s\n", trainer.last_saved().c_str(),
              drew ? curves.c_str() : "(not written: see the warning)");
  if (watcher) {
    const int64_t rows = std::min<int64_t>(o.watch_rows, (int64_t)valid_set.size());
    std::printf("%s\n", watcher->finish(cat_str("the first ", rows, " validation pairs"), trainer.train_seconds()).c_str());
  }
  return 0;
}

// ---------------------------------------------------------------- eval

struct EvalOptions {
  std::string checkpoint, data;
  int64_t show = 5;
};

int eval(const EvalOptions& o) {
  const std::string &path = o.checkpoint, &data = o.data;
  const int64_t show = o.show;
  Loaded l = load_model(path);
  auto pairs = text::read_pairs(data);
  // an expected output the model cannot write counts as wrong, not as an error
  auto set = seq2seq::encode_pairs(pairs, data, l.src_vocab, l.tgt_vocab, /*unknown_targets=*/true);
  std::vector<std::vector<int64_t>> sources, targets;
  for (size_t i = 0; i < set.size(); i++) {
    if ((int64_t)set[i].source.size() + 1 > l.model->cfg.max_len)
      fail("translate eval", data, ":", pairs[i].line, ": the source has ", set[i].source.size(),
           " characters; this model reads at most ", l.model->cfg.max_len - 1);
    sources.push_back(set[i].source), targets.push_back(set[i].target);
  }
  int64_t longest = 0;
  for (auto& t : targets) longest = std::max<int64_t>(longest, (int64_t)t.size());
  const auto t0 = Clock::now();
  auto outputs = seq2seq::greedy_decode(*l.model, sources, std::min(longest + 8, l.model->cfg.max_len - 1));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  seq2seq::Accuracy acc = seq2seq::accuracy(outputs, targets);
  std::printf("%s: %lld pairs, exact match %.2f%%, per character %.2f%% (decoded in %.2f s)\n", data.c_str(),
              (long long)acc.count, 100 * acc.exact, 100 * acc.per_char, seconds);
  int64_t shown = 0, wrong = 0;
  for (size_t i = 0; i < outputs.size(); i++) {
    if (outputs[i] == targets[i]) continue;
    wrong++;
    if (shown++ == 0 && show > 0) std::printf("%-34s %-12s %s\n", "source", "expected", "got");
    if (shown <= show)
      std::printf("%-34s %-12s %s\n", pairs[i].source.c_str(), pairs[i].target.c_str(),
                  l.tgt_vocab.decode(outputs[i]).c_str());
  }
  if (wrong > show && show > 0) std::printf("... and %lld more errors\n", (long long)(wrong - show));
  return 0;
}

// ---------------------------------------------------------------- decode

struct DecodeOptions {
  std::string checkpoint;
  std::vector<std::string> texts;
};

int decode(const DecodeOptions& o) {
  const std::string& path = o.checkpoint;
  Loaded l = load_model(path);
  std::vector<std::string> inputs = o.texts;
  const bool from_stdin = inputs.empty();
  if (from_stdin) {
    // lines of at most kMaxLine bytes, kMaxInput in all: endless input (/dev/zero) is refused, not stored
    constexpr size_t kMaxLine = size_t(1) << 20, kMaxInput = size_t(1) << 30;
    size_t total = 0;
    std::string line;
    for (int c; (c = std::getchar()) != EOF;) {
      if (c != '\n') {
        line.push_back((char)c);
        if (line.size() > kMaxLine)
          fail("translate decode", "line ", inputs.size() + 1, " of standard input is longer than ", kMaxLine,
               " bytes: ", printable(line));
        continue;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (inputs.empty() && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a byte-order mark
      total += line.size() + 1;
      if (total > kMaxInput) fail("translate decode", "standard input holds more than ", kMaxInput, " bytes");
      inputs.push_back(std::move(line));
      line.clear();
    }
    if (std::ferror(stdin)) fail("translate decode", "cannot read standard input: ", std::strerror(errno));
    if (!line.empty()) {  // a last line without a newline
      if (line.back() == '\r') line.pop_back();
      if (inputs.empty() && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
      inputs.push_back(line);
    }
  }
  // Translate the good inputs together; a bad one reports its error (stderr) and leaves
  // an empty output line, so outputs stay aligned with inputs.
  std::vector<std::vector<int64_t>> sources;
  std::vector<size_t> where;
  std::vector<std::string> errors(inputs.size());
  for (size_t i = 0; i < inputs.size(); i++) {
    try {
      sources.push_back(source_ids(l, inputs[i]));
      where.push_back(i);
    } catch (const Error& e) {
      errors[i] = e.what();
    }
  }
  auto outputs = seq2seq::greedy_decode(*l.model, sources, l.model->cfg.max_len - 1);
  std::vector<std::string> results(inputs.size());
  for (size_t k = 0; k < where.size(); k++) results[where[k]] = l.tgt_vocab.decode(outputs[k]);
  int failures = 0;
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!errors[i].empty()) {
      failures++;
      std::fflush(stdout);
      std::fprintf(stderr, "translate decode: %s %zu (%s): %s\n", from_stdin ? "line" : "argument", i + 1,
                   printable(inputs[i]).c_str(), errors[i].c_str());
    }
    std::printf("%s\n", results[i].c_str());
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    fail("translate decode", "cannot write the translations: ", std::strerror(errno));
  return failures ? 1 : 0;
}

// ---------------------------------------------------------------- attention

std::vector<std::vector<double>> matrix(const Tensor& t) {  // [R, C]
  std::vector<std::vector<double>> m((size_t)t.size(0));
  auto v = t.contiguous().to_vector<double>();
  for (int64_t r = 0; r < t.size(0); r++) m[(size_t)r].assign(v.begin() + r * t.size(1), v.begin() + (r + 1) * t.size(1));
  return m;
}

struct AttentionOptions {
  std::string checkpoint, out, text;
  int64_t pad = 4;
};

int attention(const AttentionOptions& o) {
  const std::string &path = o.checkpoint, &out = o.out, &input = o.text;
  const int64_t pads = o.pad;
  Loaded l = load_model(path);
  std::vector<int64_t> ids = source_ids(l, input);
  if ((int64_t)ids.size() + 1 + pads > l.model->cfg.max_len)
    fail("translate attention", "the input (", ids.size(), " characters, and </s>) and --pad ", pads,
         " pad positions exceed the model's maximum length ", l.model->cfg.max_len);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) fail("translate attention", "cannot create '", out, "': ", ec.message());
  auto produced = seq2seq::greedy_decode(*l.model, {ids}, l.model->cfg.max_len - 1)[0];

  // Teacher-force the produced output and keep every layer's weights. The source gets
  // `pads` pad positions, masked, to show that they receive no weight.
  std::vector<int64_t> src = ids, tgt_in = {CharVocab::kBegin};
  src.push_back(CharVocab::kEnd);
  for (int64_t p = 0; p < pads; p++) src.push_back(CharVocab::kPad);
  for (int64_t id : produced) tgt_in.push_back(id);
  nn::Transformer& m = *l.model;
  for (size_t i = 0; i < (size_t)m.cfg.num_encoder_layers; i++) m.encoder->layer(i)->keep_weights = true;
  for (size_t i = 0; i < (size_t)m.cfg.num_decoder_layers; i++) m.decoder->layer(i)->keep_weights = true;
  {
    NoGradGuard ng;
    m.forward(from_vector(src, {1, (int64_t)src.size()}), from_vector(tgt_in, {1, (int64_t)tgt_in.size()}));
  }
  std::vector<std::string> src_labels, out_labels;
  for (int64_t id : src)
    src_labels.push_back(id == CharVocab::kEnd ? "</s>" : id == CharVocab::kPad ? "pad" : l.src_vocab.tokens()[(size_t)id]);
  for (int64_t id : produced) out_labels.push_back(l.tgt_vocab.tokens()[(size_t)id]);
  out_labels.push_back("</s>");
  for (auto& s : src_labels)
    if (s == " ") s = "\xE2\x90\xA3";  // a visible space
  const std::string translation = l.tgt_vocab.decode(produced);

  std::vector<std::string> written;
  // the source's pad positions: blocked keys, and in the encoder padding queries
  std::vector<bool> pad_flags;
  for (int64_t id : src) pad_flags.push_back(id == CharVocab::kPad);
  const Tensor src_pad = from_bools(pad_flags, {1, (int64_t)src.size()});
  const Tensor blocked_keys = src_pad.reshape({1, 1, 1, (int64_t)src.size()});
  auto draw = [&](const std::string& file, const std::string& title, const Tensor& w /* [1, H, R, C] */,
                  const std::vector<std::string>& rows, const std::string& ylabel, const Tensor& query_padding) {
    const int64_t H = w.size(1);
    // per head: the mean entropy of its queries' weights and their mean largest weight
    auto stats = watch::head_statistics(Tensor(), w, Tensor(), Tensor(), blocked_keys, query_padding);
    std::vector<plot::Panel> panels;
    for (int64_t h = 0; h <= H; h++) {
      Tensor m2 = h < H ? w.select(0, 0).select(0, h) : mean(w.select(0, 0), {0});
      plot::Heatmap p;
      char head[128];
      if (h < H)
        std::snprintf(head, sizeof head, "head %lld: entropy %.2f, largest weight %.2f", (long long)(h + 1),
                      stats["entropy_mean"][(size_t)h], stats["max_weight_mean"][(size_t)h]);
      p.title = h < H ? head : "mean of the heads";
      p.xlabel = "source characters";
      p.ylabel = ylabel;
      p.values = matrix(m2);
      p.row_labels = rows;
      p.col_labels = src_labels;
      p.vmax = 1.0;
      panels.push_back(p);
    }
    const int columns = int(std::min<int64_t>(H + 1, 3));
    // panels tall enough for square cells, plus room for the labels
    const double cell = 490.0 / double(src_labels.size());
    const int height = std::clamp(int(cell * double(rows.size())) + 120, 200, 720);
    plot::save_png(out + "/" + file, panels, columns, 560, height, title);
    written.push_back(out + "/" + file);
  };
  for (int64_t i = 0; i < m.cfg.num_decoder_layers; i++)
    draw("cross_attention_layer" + std::to_string(i + 1) + ".png",
         "decoder layer " + std::to_string(i + 1) + " cross-attention: \"" + input + "\" -> " + translation,
         m.decoder->layer((size_t)i)->last_cross_weights, out_labels, "produced characters", Tensor());
  for (int64_t i = 0; i < m.cfg.num_encoder_layers; i++)
    draw("encoder_self_attention_layer" + std::to_string(i + 1) + ".png",
         "encoder layer " + std::to_string(i + 1) + " self-attention: \"" + input + "\"",
         m.encoder->layer((size_t)i)->last_weights, src_labels, "query characters", src_pad);
  std::printf("%s -> %s\n", input.c_str(), translation.c_str());
  for (auto& f : written) std::printf("wrote %s\n", f.c_str());
  return 0;
}

// ---------------------------------------------------------------- watch

struct WatchOptions {
  std::string checkpoint, data = "data/dates/valid.tsv";
  int64_t rows = 64;
};

int watch_checkpoint(const WatchOptions& o) {
  Loaded l = load_model(o.checkpoint);
  auto pairs = text::read_pairs(o.data);
  // a target the model cannot write is still a target: <unk> (a source character must be known)
  std::vector<Example> set = seq2seq::encode_pairs(pairs, o.data, l.src_vocab, l.tgt_vocab, /*unknown_targets=*/true);
  check_lengths(pairs, set, o.data, l.model->cfg.max_len, "translate watch", "the model's max_len");
  const int64_t rows = std::min<int64_t>(o.rows, (int64_t)set.size());
  watch::Probe probe = probe_of(*l.model, set, rows);
  watch::Log log = watch::Log::for_sites(probe.sites);
  log.add(watch::measure(probe, l.checkpoint.progress.step));
  const auto& cfg = l.model->cfg;
  std::printf("%s: step %lld, d_model %lld, %lld heads (d_k %lld), --score-scale %g; the first %lld pairs of %s, "
              "teacher-forced, in eval mode\n",
              o.checkpoint.c_str(), (long long)l.checkpoint.progress.step, (long long)cfg.d_model, (long long)cfg.nhead,
              (long long)(cfg.d_model / cfg.nhead), cfg.score_scale, (long long)rows, o.data.c_str());
  std::printf("score std: of the softmax's input over allowed keys; entropy in nats, H/logn normalised by the number "
              "of keys; max w: the largest weight; sat.: queries whose largest weight is above 0.99; P the weights, Z "
              "the scores, Wq and Wk the head's rows of the query and key projections\n\n%s",
              watch::table(log, log.snapshots.back()).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun every process runs this program as one rank of the job. A rank that fails
  // ends the whole job (no other rank is left waiting for it in a collective); one that
  // returns - done, a stop signal, a loss that is not finite: the same on every rank -
  // leaves MPI in order.
  const bool ranks = dist::launched_by_mpirun();
  if (ranks) dist::init(&argc, &argv);
  bool failed = false;
  const int code = cli::run("translate", [&] {
    CLI::App app{"A character-level encoder-decoder Transformer that turns dates as people write them into ISO dates.",
                 "translate"};
    app.require_subcommand(1);
    app.fallthrough(false);

    TrainOptions train_options;
    CLI::App* train_cmd = app.add_subcommand("train", "train a model on pair files (or continue one with --resume)");
    add_train_options(train_cmd, train_options);

    EvalOptions eval_options;
    CLI::App* eval_cmd = app.add_subcommand("eval", "exact-match and per-character accuracy of a checkpoint on a pair file");
    cli::text(*eval_cmd, "--checkpoint", eval_options.checkpoint, "the checkpoint")->required();
    cli::text(*eval_cmd, "--data", eval_options.data, "pairs, source<TAB>target a line")->required();
    cli::integer(*eval_cmd, "--show", eval_options.show, 0, cli::kMaxCount, "show this many mistakes");

    DecodeOptions decode_options;
    CLI::App* decode_cmd = app.add_subcommand("decode", "translate each TEXT (without TEXT: each line of stdin), one line each");
    cli::text(*decode_cmd, "--checkpoint", decode_options.checkpoint, "the checkpoint")->required();
    decode_cmd->add_option("TEXT", decode_options.texts, "dates to translate");

    AttentionOptions attention_options;
    CLI::App* attention_cmd = app.add_subcommand(
        "attention", "draw each decoder layer's cross-attention and each encoder layer's self-attention for one TEXT");
    cli::text(*attention_cmd, "--checkpoint", attention_options.checkpoint, "the checkpoint")->required();
    cli::text(*attention_cmd, "--out", attention_options.out, "directory for the pictures")->required();
    cli::integer(*attention_cmd, "--pad", attention_options.pad, 0, seq2seq::kMaxLength,
                 "masked pad positions after the source, to show they get no weight");
    attention_cmd->add_option("TEXT", attention_options.text, "the date to translate")->required();

    WatchOptions watch_options;
    CLI::App* watch_cmd = app.add_subcommand(
        "watch", "per attention head of a checkpoint: how peaked its softmax is and how much gradient passes through it");
    cli::text(*watch_cmd, "--checkpoint", watch_options.checkpoint, "the checkpoint")->required();
    cli::text(*watch_cmd, "--data", watch_options.data, "pairs, source<TAB>target a line: the probe batch is the first --rows");
    cli::integer(*watch_cmd, "--rows", watch_options.rows, 1, 100000, "pairs in the probe batch");

    // `translate help` as `translate --help`
    std::vector<char*> args(argv, argv + argc);
    static char help[] = "--help";
    if (argc == 2 && std::string(argv[1]) == "help") args[1] = help;
    cli::parse(app, (int)args.size(), args.data());

    // errors name the command ("translate eval: ...") unless they already do, and the
    // rank in a job of several
    auto as = [&](const std::string& command, const std::function<int()>& run) {
      const std::string who = "translate " + command;
      const std::string rank = dist::world_size() > 1 ? cat_str(" (rank ", dist::rank(), " of ", dist::world_size(), ")") : "";
      auto named = [&](const std::string& what) {
        if (what.rfind(who, 0) == 0) return who + rank + what.substr(who.size());
        return who + rank + ": " + what;
      };
      try {
        return run();
      } catch (const OutOfMemory& e) {
        failed = true;
        throw OutOfMemory(named(e.what()));
      } catch (const Error& e) {
        failed = true;
        throw Error(named(e.what()));
      } catch (const UsageError& e) {
        failed = true;
        throw UsageError{rank.empty() ? e.message : cat_str("rank ", dist::rank(), ": ", e.message), e.command};
      } catch (...) {
        failed = true;
        throw;
      }
    };
    if (train_cmd->parsed()) return as("train", [&] { return train(train_options); });
    if (dist::rank() != 0) return 0;  // under mpirun, the other commands are rank 0's alone
    if (eval_cmd->parsed()) return as("eval", [&] { return eval(eval_options); });
    if (decode_cmd->parsed()) return as("decode", [&] { return decode(decode_options); });
    if (watch_cmd->parsed()) return as("watch", [&] { return watch_checkpoint(watch_options); });
    return as("attention", [&] { return attention(attention_options); });
  });
  if (ranks) {
    if (failed) dist::abort_job(code);
    dist::finalize();
  }
  return code;
}
