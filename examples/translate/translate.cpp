// translate: a character-level encoder-decoder Transformer that learns to turn dates
// written by people ("sunday, november 22, 2026", "22/11/2026", ...) into ISO dates.
//
//   translate train     [options]                        train (or --resume) on data/dates
//   translate eval      --checkpoint C --data FILE       exact-match and per-character accuracy
//   translate decode    --checkpoint C [TEXT ...]        one translation a line (stdin without TEXT)
//   translate attention --checkpoint C --out DIR TEXT    PNG heatmaps of the attention weights
//
// `translate help` lists every option.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/storage.h"
#include "nn/functional.h"
#include "optim/checkpoint.h"
#include "optim/schedule.h"
#include "plot/plot.h"
#include "seq2seq.h"

using namespace ember;
using seq2seq::Example;
using text::CharVocab;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

const char* kUsage = R"(usage:
  translate train [options]
      --train FILE        training pairs (default data/dates/train.tsv)
      --valid FILE        validation pairs (default data/dates/valid.tsv)
      --out DIR           checkpoints, curves.png and log (default runs/dates)
      --resume C|auto     continue from checkpoint C, or from the newest one in --out
      --steps N           at most N optimizer steps (default 3000)
      --target-acc A      stop once validation exact match reaches A (default 0.995; 2 = never)
      --batch N           pairs per batch (default 64)
      --d-model N --heads N --enc-layers N --dec-layers N --ffn N --dropout P --max-len N
                          model shape (defaults 128, 4, 2, 2, 512, 0.1, 64)
      --lr X --warmup N   Adam's peak learning rate, reached after N warmup steps, then
                          decaying as 1/sqrt(step) (defaults 1e-3, 400)
      --clip X            clip the gradient norm to X (default 0: no clipping)
      --eval-every N      validation exact match every N steps (default 200)
      --save-every N      checkpoint every N steps (default 500; also at the end and on Ctrl-C)
      --keep N            keep the newest N checkpoints (default 3)
      --log-every N       a progress line every N steps when not on a terminal (default 50)
      --seed N            initialisation, dropout and data order (default 1)
      --threads N         threads (default: OMP_NUM_THREADS, else every core)
  translate eval --checkpoint C --data FILE [--show N]
  translate decode --checkpoint C [TEXT ...]        (reads lines from stdin without TEXT)
  translate attention --checkpoint C --out DIR [--pad N] TEXT
)";

// A bad command line: the message and the usage, exit code 2.
using cli::UsageError;

// Options as --name value pairs, plus positional arguments.
struct Args {
  std::map<std::string, std::string> options;
  std::vector<std::string> positional;

  Args(int argc, char** argv, int first, const std::vector<std::string>& known) {
    for (int i = first; i < argc; i++) {
      std::string a = argv[i];
      if (a.rfind("--", 0) == 0 && a.size() > 2) {
        if (std::find(known.begin(), known.end(), a.substr(2)) == known.end())
          throw UsageError{"unknown option " + a};
        if (i + 1 >= argc) throw UsageError{"missing value after " + a};
        options[a.substr(2)] = argv[++i];
      } else {
        positional.push_back(a);
      }
    }
  }
  bool has(const std::string& k) const { return options.count(k) > 0; }
  std::string str(const std::string& k, const std::string& def) const {
    auto it = options.find(k);
    return it == options.end() ? def : it->second;
  }
  std::string required(const std::string& k) const {
    if (!has(k)) throw UsageError{"--" + k + " is required"};
    return options.at(k);
  }
  int64_t integer(const std::string& k, int64_t def, int64_t lo = 0) const {
    if (!has(k)) return def;
    return cli::parse_int("--" + k, options.at(k), lo);
  }
  double real(const std::string& k, double def, double lo = 0) const {
    if (!has(k)) return def;
    return cli::parse_real("--" + k, options.at(k), lo);
  }
};

std::string clock_time(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = long(seconds + 0.5);
  char b[32];
  if (s >= 3600) std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(b, sizeof b, "%ld:%02ld", s / 60, s % 60);
  return b;
}

// ---------------------------------------------------------------- a trained model

struct Loaded {
  std::shared_ptr<nn::Transformer> model;
  CharVocab src_vocab, tgt_vocab;
  optim::Checkpoint checkpoint;
};

CharVocab vocab_of(const optim::Checkpoint& c, const std::string& name, const std::string& file) {
  auto it = c.vocab.find(name);
  if (it == c.vocab.end()) fail("translate", "'", file, "': key '/vocab/", name, "' is missing");
  try {
    return CharVocab::from_tokens(it->second);
  } catch (const Error& e) {
    fail("translate", "'", file, "': key '/vocab/", name, "': ", e.what());
  }
}

Loaded load_model(const std::string& path) {
  Loaded l;
  l.checkpoint = optim::read_checkpoint(path);
  nn::TransformerConfig cfg = seq2seq::from_config(l.checkpoint.config, path);
  l.src_vocab = vocab_of(l.checkpoint, "source", path);
  l.tgt_vocab = vocab_of(l.checkpoint, "target", path);
  if (l.src_vocab.size() != cfg.src_vocab || l.tgt_vocab.size() != cfg.tgt_vocab)
    fail("translate", "'", path, "': the vocabularies have ", l.src_vocab.size(), " and ", l.tgt_vocab.size(),
         " tokens, the configuration says ", cfg.src_vocab, " and ", cfg.tgt_vocab);
  l.model = std::make_shared<nn::Transformer>(cfg);
  optim::ResumeTargets t;
  t.model = l.model->state_dict();
  t.config = l.checkpoint.config;
  optim::load_checkpoint(path, t);
  l.model->eval();
  return l;
}

// The ids of one input line for the model, or an error saying what is wrong with it.
std::vector<int64_t> source_ids(const Loaded& l, const std::string& line) {
  if (line.empty()) fail("translate", "the input is empty");
  std::vector<int64_t> ids = l.src_vocab.encode(line);
  const int64_t limit = l.model->cfg.max_len - 1;  // room for </s>
  if ((int64_t)ids.size() > limit)
    fail("translate", "the input has ", ids.size(), " characters; this model reads at most ", limit);
  return ids;
}

// ---------------------------------------------------------------- train

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

struct History {
  std::vector<double> step, loss, eval_step, eval_acc;
};

void write_curves(const std::string& path, const History& h) {
  plot::Lines loss{"training loss (cross-entropy per target token)", "step", "loss", {{"train", h.step, h.loss}}};
  loss.log_y = true;
  plot::Lines acc{"validation exact match", "step", "accuracy", {{"valid", h.eval_step, h.eval_acc}}};
  acc.ymin = 0, acc.ymax = 1;
  plot::save_png(path, {loss, acc}, 2, 560, 380);
}

int train(const Args& a) {
  const std::string train_path = a.str("train", "data/dates/train.tsv"), valid_path = a.str("valid", "data/dates/valid.tsv");
  const std::string out = a.str("out", "runs/dates");
  const int64_t max_steps = a.integer("steps", 3000, 1), batch = a.integer("batch", 64, 1);
  const int64_t eval_every = a.integer("eval-every", 200, 1), save_every = a.integer("save-every", 500, 1);
  const int64_t log_every = a.integer("log-every", 50, 1), keep = a.integer("keep", 3, 1);
  const double target_acc = a.real("target-acc", 0.995), clip = a.real("clip", 0);
  const double peak_lr = a.real("lr", 1e-3);
  const int64_t warmup = a.integer("warmup", 400, 1), seed = a.integer("seed", 1);
  if (a.has("threads")) set_num_threads((int)a.integer("threads", 1, 1));

  auto train_pairs = text::read_pairs(train_path);
  auto valid_pairs = text::read_pairs(valid_path);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) fail("translate train", "cannot create '", out, "': ", ec.message());
  optim::CheckpointManager ckpts(out, (int)keep, "ckpt");

  // The checkpoint to resume from, if any: its configuration and vocabularies win.
  std::optional<std::string> resume;
  if (a.has("resume")) {
    resume = a.str("resume", "");
    if (*resume == "auto") {
      resume = ckpts.latest();
      if (!resume) std::printf("no checkpoint in %s: starting afresh\n", out.c_str());
    }
  }
  if (!resume && ckpts.latest())
    fail("translate train", "'", out, "' already holds checkpoints (", *ckpts.latest(),
         "); continue with --resume auto, or choose another --out");
  std::optional<optim::Checkpoint> previous;
  if (resume) previous = optim::read_checkpoint(*resume);

  nn::TransformerConfig cfg;
  CharVocab src_vocab, tgt_vocab;
  if (previous) {
    cfg = seq2seq::from_config(previous->config, *resume);
    src_vocab = vocab_of(*previous, "source", *resume);
    tgt_vocab = vocab_of(*previous, "target", *resume);
  } else {
    std::vector<std::string> sources, targets;
    for (auto& p : train_pairs) sources.push_back(p.source), targets.push_back(p.target);
    src_vocab = CharVocab::build(sources);
    tgt_vocab = CharVocab::build(targets);
    cfg.src_vocab = src_vocab.size();
    cfg.tgt_vocab = tgt_vocab.size();
    cfg.d_model = a.integer("d-model", 128, 1);
    cfg.nhead = a.integer("heads", 4, 1);
    cfg.num_encoder_layers = a.integer("enc-layers", 2, 0);
    cfg.num_decoder_layers = a.integer("dec-layers", 2, 1);
    cfg.dim_feedforward = a.integer("ffn", 512, 1);
    cfg.dropout = a.real("dropout", 0.1);
    cfg.max_len = a.integer("max-len", 64, 2);
  }
  std::vector<Example> train_set = seq2seq::encode_pairs(train_pairs, train_path, src_vocab, tgt_vocab);
  std::vector<Example> valid_set = seq2seq::encode_pairs(valid_pairs, valid_path, src_vocab, tgt_vocab);
  int64_t longest_target = 0;
  for (auto* set : {&train_set, &valid_set})
    for (auto& e : *set) {
      if ((int64_t)e.source.size() + 1 > cfg.max_len || (int64_t)e.target.size() + 1 > cfg.max_len)
        fail("translate train", "a pair is longer than --max-len ", cfg.max_len, " allows");
      longest_target = std::max<int64_t>(longest_target, (int64_t)e.target.size());
    }

  manual_seed((uint64_t)seed);  // dropout draws from the default generator
  Generator init_gen((uint64_t)seed * 1000003 + 17), data_gen((uint64_t)seed * 7919 + 3);
  auto model = std::make_shared<nn::Transformer>(cfg, &init_gen);
  seq2seq::xavier_init(*model, &init_gen);
  auto params = model->named_parameters();
  optim::Adam opt(params, {.lr = peak_lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  // lr = peak * min(step / warmup, sqrt(warmup / step)): the inverse-square-root schedule
  optim::InverseSqrtSchedule sched(cfg.d_model, warmup, peak_lr * std::sqrt(double(cfg.d_model * warmup)));

  optim::Progress progress;
  std::vector<int64_t> order;
  History hist;
  if (previous) {
    optim::ResumeTargets t;
    t.model = model->state_dict();
    t.optimizer = &opt;
    t.schedule = &sched;
    t.generators = {{"default", &default_generator()}, {"data", &data_gen}};
    t.config = previous->config;
    optim::Checkpoint c = optim::load_checkpoint(*resume, t);
    progress = c.progress;
    if (c.extra.count("order")) order = c.extra.at("order").to_vector<int64_t>();
    if ((int64_t)order.size() != (int64_t)train_set.size() || progress.position > (int64_t)order.size())
      fail("translate train", "'", *resume, "' was trained on ", order.size(), " pairs, ", train_path, " has ",
           train_set.size());
    auto series = [&](const char* name, std::vector<double>& x, std::vector<double>& y) {
      if (!c.extra.count(name)) return;
      auto v = c.extra.at(name).to_vector<double>();
      for (size_t i = 0; i + 1 < v.size(); i += 2) x.push_back(v[i]), y.push_back(v[i + 1]);
    };
    series("loss_history", hist.step, hist.loss);
    series("valid_history", hist.eval_step, hist.eval_acc);
    std::printf("resumed from %s at step %lld (epoch %lld, pair %lld of the epoch)\n", resume->c_str(),
                (long long)progress.step, (long long)progress.epoch, (long long)progress.position);
  }

  auto new_epoch_order = [&] {
    order.resize(train_set.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = (int64_t)i;
    for (size_t i = order.size() - 1; i > 0; i--) std::swap(order[i], order[data_gen.next_u64() % (i + 1)]);
  };
  if (order.empty()) new_epoch_order();

  auto save = [&](const char* why) {
    optim::Checkpoint c = optim::make_checkpoint(model->state_dict(), &opt, &sched,
                                                 {{"default", &default_generator()}, {"data", &data_gen}}, progress,
                                                 seq2seq::to_config(cfg));
    c.vocab["source"] = src_vocab.tokens();
    c.vocab["target"] = tgt_vocab.tokens();
    c.extra["order"] = from_vector(order, {(int64_t)order.size()});
    auto pairs = [](const std::vector<double>& x, const std::vector<double>& y) {
      std::vector<double> v;
      for (size_t i = 0; i < x.size(); i++) v.push_back(x[i]), v.push_back(y[i]);
      return from_vector(v, {(int64_t)x.size(), 2});
    };
    c.extra["loss_history"] = pairs(hist.step, hist.loss);
    c.extra["valid_history"] = pairs(hist.eval_step, hist.eval_acc);
    std::string path = ckpts.save(c);
    std::printf("%ssaved %s (%s)\n", isatty(1) ? "\n" : "", path.c_str(), why);
    return path;
  };

  std::vector<std::vector<int64_t>> valid_sources, valid_targets;
  for (auto& e : valid_set) valid_sources.push_back(e.source), valid_targets.push_back(e.target);

  std::printf("training a %lld-parameter Transformer (d_model %lld, %lld heads, %lld+%lld layers, ffn %lld) on %zu pairs, "
              "%d threads\n",
              (long long)model->num_parameters(), (long long)cfg.d_model, (long long)cfg.nhead,
              (long long)cfg.num_encoder_layers, (long long)cfg.num_decoder_layers, (long long)cfg.dim_feedforward,
              train_set.size(), num_threads());
  std::signal(SIGINT, on_sigint);
  const bool tty = isatty(1);
  const auto start = Clock::now();
  double train_seconds = 0, window_loss = 0;
  int64_t window_steps = 0, window_tokens = 0;
  auto window_start = Clock::now();
  std::string last_saved;
  double best_acc = hist.eval_acc.empty() ? 0 : hist.eval_acc.back();
  bool reached = best_acc >= target_acc;
  // large buffers taken from the system inside training steps after step 100 (evaluation
  // not counted): 0 when steady-state training reuses its buffers
  // steps after step 100, those of them in which the allocator took memory from the system, and how much
  int64_t steady_steps = 0, steady_grew = 0, steady_growth = 0;
  model->train();

  while (progress.step < max_steps && !reached) {
    if (g_interrupted) {
      save("interrupted");
      std::printf("interrupted at step %lld; resume with --resume auto\n", (long long)progress.step);
      return 130;
    }
    if (progress.position >= (int64_t)order.size()) {
      progress.epoch++;
      progress.position = 0;
      new_epoch_order();
    }
    std::vector<const Example*> rows;
    for (int64_t k = 0; k < batch && progress.position < (int64_t)order.size(); k++)
      rows.push_back(&train_set[(size_t)order[(size_t)progress.position++]]);
    seq2seq::Batch b = seq2seq::make_batch(rows);

    const auto t0 = Clock::now();
    const int64_t held_before = Storage::system_bytes();
    const double lr = sched.step(opt);
    opt.zero_grad();
    Tensor logits = model->forward(b.src, b.tgt_in);
    Tensor loss = nn::cross_entropy(logits.reshape({-1, cfg.tgt_vocab}), b.tgt_out.reshape({-1}), CharVocab::kPad);
    const double loss_value = loss.item();
    if (!std::isfinite(loss_value)) {
      std::fprintf(stderr, "%stranslate train: the loss is %s at step %lld; stopping without saving. ", tty ? "\n" : "",
                   std::isnan(loss_value) ? "NaN" : "infinite", (long long)progress.step + 1);
      auto last = ckpts.latest();
      std::fprintf(stderr, "The last good checkpoint is %s.\n", last ? last->c_str() : "(none yet)");
      return 3;
    }
    loss.backward();
    if (clip > 0) optim::clip_grad_norm(params, clip);
    opt.step();
    progress.step++;
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (progress.step > 100) {
      const int64_t grown = Storage::system_bytes() - held_before;
      steady_steps++, steady_grew += grown > 0, steady_growth += grown;
    }
    window_loss += loss_value, window_steps++, window_tokens += b.target_tokens;

    const bool log_now = tty || progress.step % log_every == 0 || progress.step == max_steps;
    if (log_now) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double window = std::chrono::duration<double>(Clock::now() - window_start).count();
      const double per_step = elapsed / double(progress.step - (previous ? previous->progress.step : 0));
      std::printf("%sstep %lld/%lld  epoch %lld  loss %.4f  lr %.2e  %.0f tok/s  elapsed %s  remaining %s%s",
                  tty ? "\r" : "", (long long)progress.step, (long long)max_steps, (long long)progress.epoch,
                  window_loss / double(window_steps), lr, double(window_tokens) / std::max(window, 1e-9),
                  clock_time(elapsed).c_str(), clock_time(per_step * double(max_steps - progress.step)).c_str(),
                  tty ? "   " : "\n");
      std::fflush(stdout);
      if (!tty || progress.step % log_every == 0) {
        hist.step.push_back(double(progress.step));
        hist.loss.push_back(window_loss / double(window_steps));
        window_loss = 0, window_steps = 0, window_tokens = 0, window_start = Clock::now();
      }
    }
    if (progress.step % eval_every == 0 || progress.step == max_steps) {
      auto outputs = seq2seq::greedy_decode(*model, valid_sources, longest_target + 2);
      seq2seq::Accuracy acc = seq2seq::accuracy(outputs, valid_targets);
      hist.eval_step.push_back(double(progress.step));
      hist.eval_acc.push_back(acc.exact);
      best_acc = std::max(best_acc, acc.exact);
      reached = acc.exact >= target_acc;
      std::printf("%sstep %lld: validation exact match %.2f%%, per character %.2f%% (%.0f s of training)\n",
                  tty ? "\n" : "", (long long)progress.step, 100 * acc.exact, 100 * acc.per_char, train_seconds);
      write_curves(out + "/curves.png", hist);
      window_start = Clock::now();
    }
    if (progress.step % save_every == 0 && !reached) last_saved = save("every --save-every steps");
  }
  last_saved = save(reached ? "target accuracy reached" : "last step");
  write_curves(out + "/curves.png", hist);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("done: %lld steps, %.1f s of training (%.1f s wall), best validation exact match %.2f%%\n",
              (long long)progress.step, train_seconds, wall, 100 * best_acc);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf("memory: peak %.0f MB resident; the allocator holds %.0f MB; %lld of %lld training steps after step 100 "
              "took no memory from the system (the other %lld: %.0f KB in all)\n",
              double(ru.ru_maxrss) / 1024.0, double(Storage::system_bytes()) / 1048576.0,
              (long long)(steady_steps - steady_grew), (long long)steady_steps, (long long)steady_grew,
              double(steady_growth) / 1024.0);
  std::printf("checkpoint: %s\ncurves: %s/curves.png\n", last_saved.c_str(), out.c_str());
  return 0;
}

// ---------------------------------------------------------------- eval

int eval(const Args& a) {
  const std::string path = a.required("checkpoint"), data = a.required("data");
  const int64_t show = a.integer("show", 5);
  Loaded l = load_model(path);
  auto pairs = text::read_pairs(data);
  auto set = seq2seq::encode_pairs(pairs, data, l.src_vocab, l.tgt_vocab);
  std::vector<std::vector<int64_t>> sources, targets;
  for (auto& e : set) {
    if ((int64_t)e.source.size() + 1 > l.model->cfg.max_len)
      fail("translate eval", data, ": a source is longer than the model's maximum length ", l.model->cfg.max_len - 1);
    sources.push_back(e.source), targets.push_back(e.target);
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

int decode(const Args& a) {
  const std::string path = a.required("checkpoint");
  Loaded l = load_model(path);
  std::vector<std::string> inputs = a.positional;
  const bool from_stdin = inputs.empty();
  if (from_stdin)
    for (std::string line; std::getline(std::cin, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      inputs.push_back(line);
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
      std::fprintf(stderr, "translate decode: %s %zu (\"%s\"): %s\n", from_stdin ? "line" : "argument", i + 1,
                   inputs[i].c_str(), errors[i].c_str());
    }
    std::printf("%s\n", results[i].c_str());
  }
  std::fflush(stdout);
  return failures ? 1 : 0;
}

// ---------------------------------------------------------------- attention

std::vector<std::vector<double>> matrix(const Tensor& t) {  // [R, C]
  std::vector<std::vector<double>> m((size_t)t.size(0));
  auto v = t.contiguous().to_vector<double>();
  for (int64_t r = 0; r < t.size(0); r++) m[(size_t)r].assign(v.begin() + r * t.size(1), v.begin() + (r + 1) * t.size(1));
  return m;
}

int attention(const Args& a) {
  const std::string path = a.required("checkpoint"), out = a.required("out");
  const int64_t pads = a.integer("pad", 4);
  if (a.positional.size() != 1) throw UsageError{"attention needs exactly one TEXT to translate"};
  const std::string input = a.positional[0];
  Loaded l = load_model(path);
  std::vector<int64_t> ids = source_ids(l, input);
  if ((int64_t)ids.size() + 1 + pads > l.model->cfg.max_len)
    fail("translate attention", "the input and ", pads, " pad positions exceed the model's maximum length ",
         l.model->cfg.max_len);
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
  auto draw = [&](const std::string& file, const std::string& title, const Tensor& w /* [1, H, R, C] */,
                  const std::vector<std::string>& rows, const std::string& ylabel) {
    const int64_t H = w.size(1);
    std::vector<plot::Panel> panels;
    for (int64_t h = 0; h <= H; h++) {
      Tensor m2 = h < H ? w.select(0, 0).select(0, h) : mean(w.select(0, 0), {0});
      plot::Heatmap p;
      p.title = h < H ? "head " + std::to_string(h + 1) : "mean of the heads";
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
         m.decoder->layer((size_t)i)->last_cross_weights, out_labels, "produced characters");
  for (int64_t i = 0; i < m.cfg.num_encoder_layers; i++)
    draw("encoder_self_attention_layer" + std::to_string(i + 1) + ".png",
         "encoder layer " + std::to_string(i + 1) + " self-attention: \"" + input + "\"",
         m.encoder->layer((size_t)i)->last_weights, src_labels, "query characters");
  std::printf("%s -> %s\n", input.c_str(), translation.c_str());
  for (auto& f : written) std::printf("wrote %s\n", f.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "train")
      return train(Args(argc, argv, 2,
                        {"train", "valid", "out", "resume", "steps", "target-acc", "batch", "d-model", "heads",
                         "enc-layers", "dec-layers", "ffn", "dropout", "max-len", "lr", "warmup", "clip", "eval-every",
                         "save-every", "keep", "log-every", "seed", "threads"}));
    if (cmd == "eval") return eval(Args(argc, argv, 2, {"checkpoint", "data", "show"}));
    if (cmd == "decode") return decode(Args(argc, argv, 2, {"checkpoint"}));
    if (cmd == "attention") return attention(Args(argc, argv, 2, {"checkpoint", "out", "pad"}));
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    throw UsageError{cmd.empty() ? "a command is needed" : "unknown command '" + cmd + "'"};
  } catch (const UsageError& e) {
    std::fprintf(stderr, "translate: %s\n%s", e.message.c_str(), kUsage);
    return 2;
  } catch (const Error& e) {
    // errors raised here already name "translate ..."; others get the command in front
    const std::string what = e.what();
    if (what.rfind("translate", 0) == 0) std::fprintf(stderr, "%s\n", what.c_str());
    else std::fprintf(stderr, "translate %s: %s\n", cmd.c_str(), what.c_str());
    return 1;
  }
}
